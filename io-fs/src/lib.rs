//! `cotal-io-fs`: file-backed adapters of the plane. They execute core effects on the host's
//! disk and hold no authority logic of their own.
