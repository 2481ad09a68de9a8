//! What a `manager-caller` bearer's steps in core (the exchange's instance selection, the
//! connect's re-check and issuance: reference §3.10, §8.4, SPEC §13.15) need from the host: the
//! workspace's own manager, read fresh for every selection and re-check, and the entropy of an
//! interactive caller's first issuance.

use std::path::PathBuf;

use cotal_core::error::EpError;
use cotal_core::issued::IssuedGeneration;
use cotal_core::manager::LocalManager;
use cotal_io_fs::{local_manager, random};

use super::{Composition, PlaneInputs};

/// Where the workspace's own manager persists its identity: a CLI plane's state root; a hosted
/// plane has no local manager (reference §2.1), so its selection sees none.
#[derive(Debug, Clone)]
pub(super) struct LocalManagerFile {
    path: Option<PathBuf>,
}

impl LocalManagerFile {
    pub(super) fn new(inputs: &PlaneInputs) -> LocalManagerFile {
        LocalManagerFile {
            path: match inputs.composition {
                Composition::Cli => Some(local_manager::path(&inputs.root, &inputs.space)),
                Composition::Hosted(_) => None,
            },
        }
    }

    /// The workspace's own manager, read fresh (a malformed identity refuses, `internal`).
    pub(super) fn read(&self) -> Result<Option<LocalManager>, EpError> {
        match &self.path {
            Some(path) => local_manager::load(path).map_err(EpError::internal),
            None => Ok(None),
        }
    }
}

/// Fresh entropy for an interactive `manager-caller`'s first issuance (core writes it as a
/// generation).
pub(super) fn fresh_generation() -> Result<IssuedGeneration, EpError> {
    let fresh = random::random_bytes().map_err(EpError::internal)?;
    Ok(IssuedGeneration::from_entropy(fresh))
}
