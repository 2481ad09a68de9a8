//! Managed-agent enrollment and retirement preparation (issue 6, deliverable 4).
