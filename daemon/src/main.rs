//! `cotal-authd`: the authority plane of a Cotal space.
//!
//! Until the daemon's real job lands (self-registration on NATS, a later issue), the binary
//! offers one honest command: `demo`, a labelled walk-through of the issuance-gate fence on the
//! in-memory KV model.

mod demo;

use std::process::ExitCode;

const USAGE: &str = "\
usage: cotal-authd <command>

commands:
  demo     walk through the issuance-gate fence on the in-memory KV model (no NATS needed)
  help     print this message";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["demo"] => match demo::run(&mut std::io::stdout()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("cotal-authd demo failed: {e}");
                ExitCode::FAILURE
            }
        },
        [] | ["help" | "--help" | "-h"] => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        other => {
            eprintln!(
                "cotal-authd: unknown command {:?}\n\n{USAGE}",
                other.join(" ")
            );
            ExitCode::from(2)
        }
    }
}
