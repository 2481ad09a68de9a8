//! The host's actor ledger: interactive and managed rows, the delegation envelope, and the
//! ledger requests machines send as effects (issue 6, deliverable 4).
