//! Manager-service operations: prepare, activate, renew and the two renewals, with renewal
//! compensation (issue 6, deliverable 2).
