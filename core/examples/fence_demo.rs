//! A readable timeline of one endpoint gate's life on the in-memory KV model: provision, a
//! registration barrier's freeze and reopen, serve mints refused under the freeze (F22) and
//! released at the registered coordinate, then a re-registration that revokes the family and
//! advances the epoch (F69), after which the predecessor's mint is refused.
//!
//! Every line is produced by running the real core machines against the model; nothing is
//! scripted output. Entropy is fixed so the timeline is the same on every run.
//!
//! Run it with `cargo run -p cotal-core --example fence_demo`; `cargo test -p cotal-core` runs its
//! test, which checks the timeline's outcomes.

use std::fmt;
use std::io::Write;
use std::process::ExitCode;

use cotal_core::barrier::{self, FreezeToken, ReopenGate};
use cotal_core::driver::{drive, ModelWorld};
use cotal_core::gate::{
    Coordinates, Generation, NameAuthorityRevision, ProcessEpoch, RegistrationRevision,
};
use cotal_core::issuance::{
    observe_gate, FinalizeServeMint, GateObservation, GateRef, ProvisionGate, ServeCredential,
    ServeGrant,
};
use cotal_core::kv::Store;
use cotal_core::machine::{script, Replay};
use cotal_core::names::{
    ActorToken, CredentialId, EndpointName, InstanceId, OpId, OwnerToken, Principal, SourceMember,
    SpaceName,
};
use cotal_core::EpError;

/// Why the demo stopped early.
#[derive(Debug)]
enum DemoError {
    Io(std::io::Error),
    Core(EpError),
    /// A step did not turn out as the fence rules require.
    Unexpected(String),
}

impl fmt::Display for DemoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DemoError::Io(e) => write!(f, "writing the timeline failed: {e}"),
            DemoError::Core(e) => write!(f, "{e}"),
            DemoError::Unexpected(what) => write!(f, "unexpected outcome: {what}"),
        }
    }
}

impl From<std::io::Error> for DemoError {
    fn from(e: std::io::Error) -> Self {
        DemoError::Io(e)
    }
}

impl From<EpError> for DemoError {
    fn from(e: EpError) -> Self {
        DemoError::Core(e)
    }
}

struct Timeline<'w, W: Write> {
    out: &'w mut W,
    world: ModelWorld,
    gate: GateRef,
    step: u32,
}

impl<W: Write> Timeline<'_, W> {
    fn line(&mut self, what: &str, outcome: &str) -> Result<(), DemoError> {
        self.step += 1;
        let gate = match self.world.kv.get(Store::Auth, &self.gate.key()) {
            Some(entry) => format!(
                "rev {:>2}  {}",
                entry.revision,
                String::from_utf8_lossy(&entry.value)
            ),
            None => "absent".to_string(),
        };
        writeln!(
            self.out,
            "{:>2}. {what}\n    → {outcome}\n    gate: {gate}",
            self.step
        )?;
        Ok(())
    }

    fn observe(&mut self) -> Result<GateObservation, DemoError> {
        let gate = self.gate.clone();
        drive(
            &mut Replay::new(script(move |cx| observe_gate(cx, &gate))),
            &mut self.world,
        )?
        .ok_or_else(|| DemoError::Unexpected("the gate vanished".into()))
    }

    fn freeze(&mut self, op: &OpId) -> Result<FreezeToken, DemoError> {
        let observed = self.observe()?;
        let (gate, op) = (self.gate.clone(), op.clone());
        let freeze = script(move |cx| barrier::freeze(cx, &gate, &op, &observed));
        drive(&mut Replay::new(freeze), &mut self.world)?
            .ok_or_else(|| DemoError::Unexpected("the freeze lost its pin".into()))
    }

    fn reopen(&mut self, op: &OpId, token: FreezeToken, at: Coordinates) -> Result<(), DemoError> {
        let mut machine = ReopenGate::machine(self.gate.clone(), op.clone(), token, at);
        if drive(&mut machine, &mut self.world)? {
            Ok(())
        } else {
            Err(DemoError::Unexpected("the reopen lost its token".into()))
        }
    }

    fn mint(&mut self, grant: &ServeGrant, n: u8) -> Result<Result<String, EpError>, DemoError> {
        let credential = ServeCredential {
            credential_id: CredentialId::from_sha256_hex(&[n; 32]),
            holder_actor: ActorToken::parse("srv")?,
            source_chain: vec![SourceMember::Root],
            exp: 1_900_000_000,
        };
        let mut machine = FinalizeServeMint::machine(self.gate.clone(), grant.clone(), credential);
        Ok(drive(&mut machine, &mut self.world).map(|release| release.row_key))
    }
}

fn coordinates(generation: u64, epoch: u64, registration: u64) -> Coordinates {
    Coordinates {
        generation: Generation(generation),
        process_epoch: ProcessEpoch(epoch),
        registration_revision: RegistrationRevision(registration),
        name_authority_revision: NameAuthorityRevision(0),
    }
}

fn grant_at(gate: &GateRef, epoch: u64, registration: u64) -> Result<ServeGrant, EpError> {
    Ok(ServeGrant {
        space: gate.space.clone(),
        endpoint: gate.endpoint.clone(),
        instance: gate.instance.clone(),
        owner: OwnerToken::parse("u_cccccccccccccccccccccccccc")?,
        epoch: ProcessEpoch(epoch),
        registration_revision: RegistrationRevision(registration),
        name_authority_revision: NameAuthorityRevision(0),
    })
}

fn refusal(result: Result<String, EpError>) -> Result<String, DemoError> {
    match result {
        Err(e) => Ok(format!("refused {}: {}", e.code, e.message)),
        Ok(key) => Err(DemoError::Unexpected(format!(
            "a mint that must be refused was released as {key}"
        ))),
    }
}

/// Writes the timeline to `out`.
fn run<W: Write>(out: &mut W) -> Result<(), DemoError> {
    writeln!(
        out,
        "fence_demo — the issuance-gate fence on the IN-MEMORY KV model (no NATS).\n\
         Every step runs the real core machines; entropy is fixed so the run is reproducible.\n"
    )?;
    let gate = GateRef::new(
        SpaceName::parse("demo")?,
        EndpointName::parse("com.acme.deploy")?,
        InstanceId::mint([0x42; 20]),
    );
    let principal = Principal::parse("u_cccccccccccccccccccccccccc.srv")?;
    let mut t = Timeline {
        out,
        world: ModelWorld::default(),
        gate: gate.clone(),
        step: 0,
    };

    drive(
        &mut ProvisionGate::machine(gate.clone(), principal.clone()),
        &mut t.world,
    )?;
    t.line(
        &format!("provision {} for {principal}", gate.key()),
        "created open at generation 0 (never registered: registration revision 0)",
    )?;

    let first = OpId::mint([0x01; 20]);
    let token = t.freeze(&first)?;
    t.line(
        &format!("registration barrier {first} freezes the gate"),
        &format!("won; freeze token = revision {}", token.0),
    )?;

    let grant = grant_at(&gate, 0, 7)?;
    let refused = refusal(t.mint(&grant, 1)?)?;
    t.line("serve mint while the gate is frozen", &refused)?;

    t.reopen(&first, token, coordinates(1, 0, 7))?;
    t.line(
        "registration completes: reopen at the successor coordinate",
        "open at generation 1, epoch 0, registration revision 7",
    )?;

    let released = t.mint(&grant, 2)?.map_err(DemoError::Core)?;
    t.line(
        "serve mint at (epoch 0, registration revision 7)",
        &format!("released; ledgered at {released}"),
    )?;

    let second = OpId::mint([0x02; 20]);
    let token = t.freeze(&second)?;
    t.line(
        &format!("re-registration barrier {second} freezes the gate"),
        &format!("won; freeze token = revision {}", token.0),
    )?;
    let revoked = revoke_family(&mut t)?;
    t.line(
        "the barrier enumerates the family and revokes every active row",
        &format!("revoked {revoked} row(s)"),
    )?;
    t.reopen(&second, token, coordinates(2, 1, 9))?;
    t.line(
        "re-registration completes: reopen with the epoch advanced",
        "open at generation 2, epoch 1, registration revision 9",
    )?;

    let refused = refusal(t.mint(&grant, 3)?)?;
    t.line(
        "the predecessor's mint at the old coordinate (epoch 0)",
        &refused,
    )?;

    let released = t
        .mint(&grant_at(&gate, 1, 9)?, 4)?
        .map_err(DemoError::Core)?;
    t.line(
        "the successor's mint at (epoch 1, registration revision 9)",
        &format!("released; ledgered at {released}"),
    )?;
    writeln!(
        t.out,
        "\n{} KV requests served by the model.",
        t.world.kv.requests_served()
    )?;
    Ok(())
}

fn revoke_family<W: Write>(t: &mut Timeline<'_, W>) -> Result<usize, DemoError> {
    let rows = drive(
        &mut Replay::new(barrier::EnumerateFamily {
            gate: t.gate.clone(),
        }),
        &mut t.world,
    )?;
    let mut revoked = 0;
    for row in rows {
        let mut machine = Replay::new(barrier::RevokeRow { key: row.key });
        if drive(&mut machine, &mut t.world)? == cotal_core::ledger::Revocation::Revoked {
            revoked += 1;
        }
    }
    Ok(revoked)
}

fn main() -> ExitCode {
    match run(&mut std::io::stdout()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fence_demo: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_demo_walks_the_whole_timeline() {
        let mut out = Vec::new();
        super::run(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("refused expired"), "{text}");
        assert_eq!(text.matches("released; ledgered").count(), 2, "{text}");
        assert!(text.contains("revoked 1 row(s)"), "{text}");
    }
}
