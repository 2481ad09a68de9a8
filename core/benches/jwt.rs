//! NATS JWT throughput, reported as absolute rates and as ratios against raw Ed25519 run in the
//! same process (never as thresholds):
//!
//! * mint (`jwt::user_jwt`: claims serialization, SHA-512/256 `jti`, base64url, Ed25519 sign)
//!   vs `nkeys` signing the same signing input — the codec's cost on top of the signature;
//! * verify (`jwt::verify`: parse, issuer nkey decode, Ed25519 verify, type and expiry checks)
//!   vs `nkeys` verifying the same signature with a ready key.
//!
//! The grant is an endpoint-serve-sized user JWT (a dozen queue-qualified subscribe rows,
//! epoch-pinned publish rows, three principal tags), signed by an account signing key.
//!
//! Run with `cargo bench -p cotal-core --bench jwt`.

// A benchmark times itself with the wall clock; core's purity rules bind the machines, not this.
#![allow(clippy::disallowed_methods)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use cotal_core::jwt::{self, ClaimType, Permission, Permissions, UnixSeconds, UserNats, Validity};
use cotal_core::EpError;
use nkeys::{KeyPair, KeyPairType};

const ROUNDS: u32 = 5_000;

/// Runs `f` `ROUNDS` times (after a short warm-up) and returns operations per second.
fn rate(mut f: impl FnMut(u32)) -> f64 {
    for i in 0..ROUNDS / 10 {
        f(i);
    }
    let start = Instant::now();
    for i in 0..ROUNDS {
        f(i);
    }
    f64::from(ROUNDS) / start.elapsed().max(Duration::from_nanos(1)).as_secs_f64()
}

fn key(kind: KeyPairType, n: u8) -> Result<KeyPair, EpError> {
    KeyPair::new_from_raw(kind, [n; 32]).map_err(|e| EpError::internal(e.to_string()))
}

fn main() -> Result<(), EpError> {
    let account = key(KeyPairType::Account, 3)?;
    let signing = key(KeyPairType::Account, 4)?;
    let user = key(KeyPairType::User, 5)?.public_key();
    let commands = ["deploy", "status", "describe", "cancel", "logs", "scale"];
    let rows = |prefix: &str, suffix: &str| -> Vec<String> {
        commands
            .iter()
            .map(|c| format!("cotal.acme.ep.{prefix}.com_acme_deploy.{c}.>{suffix}"))
            .collect()
    };
    let mut subscribe = rows("cls", " q.com_acme_deploy");
    subscribe.extend(rows("inst.i7k2", ""));
    let grant = UserNats {
        permissions: Permissions {
            publish: Permission {
                allow: rows("rsp.e3", ""),
                deny: Vec::new(),
            },
            subscribe: Permission {
                allow: subscribe,
                deny: Vec::new(),
            },
            response: None,
        },
        tags: ["owner:acme", "actor:srv", "principal:acme.srv"]
            .map(String::from)
            .to_vec(),
        ..UserNats::default()
    };
    let validity = Validity {
        issued_at: UnixSeconds(1_700_000_000),
        expires_at: Some(UnixSeconds(1_700_086_400)),
    };
    let mint = || {
        jwt::user_jwt(
            &signing,
            &account.public_key(),
            &user,
            "endpoint-serve",
            &grant,
            validity,
        )
    };
    let token = mint()?;
    let (input, _) = token
        .rsplit_once('.')
        .ok_or_else(|| EpError::internal("minted token has no signature"))?;
    let signature = signing
        .sign(input.as_bytes())
        .map_err(|e| EpError::internal(e.to_string()))?;
    let issuer = signing.public_key();
    let now = UnixSeconds(1_700_000_100);

    let mut failures = 0u32;
    let raw_sign = rate(|_| {
        failures += u32::from(black_box(signing.sign(black_box(input.as_bytes()))).is_err());
    });
    let mints = rate(|_| failures += u32::from(black_box(mint()).is_err()));
    let verifier =
        KeyPair::from_public_key(&issuer).map_err(|e| EpError::internal(e.to_string()))?;
    let raw_verify = rate(|_| {
        let ok = verifier.verify(black_box(input.as_bytes()), black_box(&signature));
        failures += u32::from(ok.is_err());
    });
    let verifies = rate(|_| {
        let ok = jwt::verify(black_box(&token), ClaimType::User, &issuer, now);
        failures += u32::from(black_box(ok).is_err());
    });

    println!(
        "NATS user JWT ({} bytes, {ROUNDS} rounds each, failures: {failures})",
        token.len()
    );
    println!("  baseline: nkeys sign of the signing input   {raw_sign:>10.0} /s");
    println!(
        "  jwt::user_jwt (mint + sign)                 {mints:>10.0} /s   {:.2}x baseline cost",
        raw_sign / mints
    );
    println!("  baseline: nkeys verify with a ready key     {raw_verify:>10.0} /s");
    println!(
        "  jwt::verify (decode + verify + checks)      {verifies:>10.0} /s   {:.2}x baseline cost",
        raw_verify / verifies
    );
    Ok(())
}
