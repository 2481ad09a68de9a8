//! `cotal-authd`: the authority plane of a Cotal space.
//!
//! * `up` — come up in a space as its `auth` endpoint instance through the full registration
//!   ceremony (fencing any predecessor), and hold that registration until a signal or a
//!   successor fences this process ([`up`]).
//! * `gate ls|show` — read-only tables of a space's issuance gates ([`gate_cmd`]).
//!
//! The gate fence walked through on the in-memory KV model is a core example, not a command:
//! `cargo run -p cotal-core --example fence_demo`.

mod embedded;
mod gate_cmd;
mod state;
mod up;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use cotal_core::names::{EndpointName, InstanceId, SpaceName};
use cotal_io_nats::Replicas;

const USAGE: &str = "\
usage: cotal-authd <command>

commands:
  up --space S [--server URL] [--state-dir DIR] [--replicas 1|3]
           register this plane as the space's auth instance and serve until a signal or a
           successor fences it; without --server it runs an embedded nats-server under the
           state dir (default .state/<space>)
  gate ls --space S --server URL [--replicas 1|3] [--json]
           list the space's issuance gates
  gate show --space S --server URL --endpoint E --instance I [--replicas 1|3] [--json]
           show one gate
  help     print this message";

/// Parsed `--flag value` / `--switch` arguments; every refusal is one sentence.
#[derive(Debug)]
struct Flags {
    values: BTreeMap<String, String>,
    switches: Vec<String>,
}

impl Flags {
    fn parse(args: &[String], valued: &[&str], switches: &[&str]) -> Result<Flags, String> {
        let mut flags = Flags {
            values: BTreeMap::new(),
            switches: Vec::new(),
        };
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let (name, inline) = match arg.split_once('=') {
                Some((n, v)) => (n, Some(v.to_owned())),
                None => (arg.as_str(), None),
            };
            if valued.contains(&name) {
                let value = match inline {
                    Some(v) => v,
                    None => it
                        .next()
                        .cloned()
                        .ok_or_else(|| format!("{name} needs a value"))?,
                };
                if flags.values.insert(name.to_owned(), value).is_some() {
                    return Err(format!("{name} is given twice"));
                }
            } else if switches.contains(&name) && inline.is_none() {
                flags.switches.push(name.to_owned());
            } else {
                return Err(format!("unknown argument {arg:?} (see cotal-authd help)"));
            }
        }
        Ok(flags)
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    fn required(&self, name: &str) -> Result<&str, String> {
        self.get(name).ok_or_else(|| format!("{name} is required"))
    }

    fn space(&self) -> Result<SpaceName, String> {
        SpaceName::parse(self.required("--space")?).map_err(|e| format!("--space: {}", e.message))
    }

    fn replicas(&self) -> Result<Replicas, String> {
        match self.get("--replicas") {
            None | Some("1") => Ok(Replicas::One),
            Some("3") => Ok(Replicas::Three),
            Some(other) => Err(format!("--replicas must be 1 or 3, not {other:?}")),
        }
    }

    fn server(&self) -> Result<Option<String>, String> {
        match self.get("--server") {
            None => Ok(None),
            Some(url) if url.trim().is_empty() => Err("--server must not be empty".to_owned()),
            Some(url) => Ok(Some(url.to_owned())),
        }
    }
}

fn up_args(args: &[String]) -> Result<up::UpArgs, String> {
    let flags = Flags::parse(
        args,
        &["--space", "--server", "--state-dir", "--replicas"],
        &[],
    )?;
    let space = flags.space()?;
    let state_dir = flags.get("--state-dir").map_or_else(
        || PathBuf::from(".state").join(space.as_str()),
        PathBuf::from,
    );
    Ok(up::UpArgs {
        server: flags.server()?,
        replicas: flags.replicas()?,
        state_dir,
        space,
    })
}

fn gate_args(command: &'static str, args: &[String]) -> Result<gate_cmd::GateArgs, String> {
    let show = command == "gate show";
    let valued: &[&str] = if show {
        &[
            "--space",
            "--server",
            "--replicas",
            "--endpoint",
            "--instance",
        ]
    } else {
        &["--space", "--server", "--replicas"]
    };
    let flags = Flags::parse(args, valued, &["--json"])?;
    let one = if show {
        let endpoint = EndpointName::parse(flags.required("--endpoint")?)
            .map_err(|e| format!("--endpoint: {}", e.message))?;
        let instance = InstanceId::parse(flags.required("--instance")?)
            .map_err(|e| format!("--instance: {}", e.message))?;
        Some((endpoint, instance))
    } else {
        None
    };
    Ok(gate_cmd::GateArgs {
        space: flags.space()?,
        server: flags
            .server()?
            .ok_or_else(|| "--server is required".to_owned())?,
        replicas: flags.replicas()?,
        json: flags.switches.iter().any(|s| s == "--json"),
        one,
    })
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))
}

/// Prints `why` as the one-sentence failure of `command`.
fn fail(command: &str, why: &str, code: u8) -> ExitCode {
    eprintln!("cotal-authd {command}: {why}");
    ExitCode::from(code)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    match words.as_slice() {
        ["up", ..] => {
            let rest = args.get(1..).unwrap_or_default();
            let parsed = match up_args(rest) {
                Ok(parsed) => parsed,
                Err(why) => return fail("up", &why, 2),
            };
            match runtime().and_then(|rt| rt.block_on(up::up(parsed))) {
                Ok(code) => code,
                Err(why) => fail("up", &why, 1),
            }
        }
        ["gate", sub @ ("ls" | "show"), ..] => {
            let command = if *sub == "ls" { "gate ls" } else { "gate show" };
            let parsed = match gate_args(command, args.get(2..).unwrap_or_default()) {
                Ok(parsed) => parsed,
                Err(why) => return fail(command, &why, 2),
            };
            match runtime().and_then(|rt| rt.block_on(gate_cmd::gate(parsed))) {
                Ok(out) => {
                    println!("{out}");
                    ExitCode::SUCCESS
                }
                Err(why) => fail(command, &why, 1),
            }
        }
        [] | ["help" | "--help" | "-h"] => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!(
                "cotal-authd: unknown command {:?}\n\n{USAGE}",
                args.join(" ")
            );
            ExitCode::from(2)
        }
    }
}
