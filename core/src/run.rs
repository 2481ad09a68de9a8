//! Workflow runs: admission, attempts and the run-driver renewal's run check (issue 6,
//! deliverable 3).
