//! The creds-file text: a user JWT with its seed, between the decorated rule lines.

use std::fmt;

use nkeys::{KeyPair, KeyPairType};

use crate::error::EpError;

use super::claims::ClaimType;
use super::verify::decode;
use super::MAX_CREDS_BYTES;

/// A user JWT with its seed: the content of a `.creds` file. `Debug` never prints the seed.
#[derive(Clone, PartialEq, Eq)]
pub struct Creds {
    pub jwt: String,
    pub seed: String,
}

impl fmt::Debug for Creds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Creds")
            .field("jwt", &self.jwt)
            .field("seed", &"<redacted>")
            .finish()
    }
}

impl Creds {
    /// The standard creds layout, byte for byte what nats-io/jwt v2's `FormatUserConfig`
    /// writes (decorated JWT block, the warning banner, decorated seed block, closing rule).
    pub fn text(&self) -> String {
        format!(
            "-----BEGIN NATS USER JWT-----\n{}\n------END NATS USER JWT------\n\n\
             ************************* IMPORTANT *************************\n\
             NKEY Seed printed below can be used to sign and prove identity.\n\
             NKEYs are sensitive and should be treated as secrets.\n\n\
             -----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n\n\
             *************************************************************\n",
            self.jwt, self.seed
        )
    }
}

/// Formats creds text for a user JWT and its seed, refusing (`bad-request`) what Go's
/// `FormatUserConfig` refuses: a token that is not a user JWT, a seed that is not a user
/// seed, a seed whose public key is not the JWT's subject. The signature is not checked here.
pub fn format_creds(user_jwt: &str, user_seed: &str) -> Result<String, EpError> {
    let creds = Creds {
        jwt: user_jwt.to_owned(),
        seed: user_seed.to_owned(),
    };
    check_creds(&creds)?;
    Ok(creds.text())
}

/// Parses creds text: the first `---…---` delimited block is the JWT, the second the seed
/// (the same blocks Go's `ParseDecoratedJWT`/`ParseDecoratedUserNKey` find, `\r\n` tolerated),
/// then checks them as [`format_creds`] does. Refusals are `bad-request`.
pub fn parse_creds(text: &str) -> Result<Creds, EpError> {
    if text.len() > MAX_CREDS_BYTES {
        return Err(EpError::bad_request(format!(
            "the creds text is {} bytes, over the {MAX_CREDS_BYTES}-byte bound",
            text.len()
        )));
    }
    let mut lines = text.lines().map(str::trim);
    let mut next_block = || -> Option<String> {
        lines.by_ref().find(|l| is_rule(l))?;
        let value = lines.next()?;
        let valid = !value.is_empty()
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '='));
        (valid && lines.next().is_some_and(is_rule)).then(|| value.to_owned())
    };
    let (Some(jwt), Some(seed)) = (next_block(), next_block()) else {
        return Err(EpError::bad_request(
            "not NATS creds: expected a delimited JWT block followed by a delimited seed block",
        ));
    };
    let creds = Creds { jwt, seed };
    check_creds(&creds)?;
    Ok(creds)
}

/// A `-----BEGIN …-----` / `------END …------` delimiter line.
fn is_rule(line: &str) -> bool {
    line.len() >= 6 && line.starts_with("---") && line.ends_with("---")
}

fn check_creds(creds: &Creds) -> Result<(), EpError> {
    let claims = decode(&creds.jwt)?;
    if claims.claim_type() != ClaimType::User {
        return Err(EpError::bad_request(format!(
            "only user JWTs go into creds, not {} JWTs",
            claims.claim_type()
        )));
    }
    let user = KeyPair::from_seed(&creds.seed)
        .ok()
        .filter(|k| k.key_pair_type() == KeyPairType::User)
        .ok_or_else(|| EpError::bad_request("the creds seed is not a user nkey seed"))?;
    if user.public_key() != claims.sub {
        return Err(EpError::bad_request(
            "the creds seed does not belong to the JWT subject",
        ));
    }
    Ok(())
}
