//! Host incarnations: self-authorized reverse-DNS host endpoints and the host fence (issue 6,
//! deliverable 5).
