//! The embedded `nats-server` ([`cotal_io_nats::embedded`]) in a state root's private
//! directory: created 0700, its config and record written 0600 by io-fs's private-file kit.

use std::path::Path;

use cotal_io_fs::files;
pub use cotal_io_nats::embedded::{client_tls, server_tls, Embedded};

/// [`Embedded::start`] in `dir`: adopts the live server recorded there or starts one from the
/// configuration `config_for(listen, store_dir)` renders.
pub fn start(
    dir: &Path,
    tls: bool,
    config_for: impl FnOnce(&str, &str) -> Result<String, String>,
) -> Result<Embedded, String> {
    files::ensure_private_dir(dir)?;
    Embedded::start(dir, tls, config_for, files::write_private)
}
