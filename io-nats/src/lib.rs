//! `cotal-io-nats`: adapter crate; executes core effects. Filled in by the adapter issues.
