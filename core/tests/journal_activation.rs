//! Run journal activation ordering (F84, F85): every branch of the pure decision, and a property
//! test over arbitrary candidate sequences.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use cotal_core::journal::{
    activation_decision, Activation, Decision, FencingToken, Refusal, RunEpoch, RunHolder,
};
use cotal_core::ErrorCode;
use proptest::prelude::*;

const TAKEOVER: &str = "0123456789abcdef";

fn act(holder: &str, epoch: u64, token: u64) -> Activation {
    Activation {
        holder: RunHolder::parse(&format!("{holder}.{TAKEOVER}")).unwrap(),
        epoch: RunEpoch(epoch),
        fencing_token: FencingToken(token),
    }
}

#[test]
fn f84_first_activation_of_an_empty_journal_activates() {
    assert_eq!(activation_decision(None, &act("a", 1, 1)), Decision::First);
}

#[test]
fn f84_lower_fencing_token_is_refused() {
    let current = act("a", 2, 5);
    for candidate in [act("a", 2, 4), act("b", 3, 1), act("a", 9, 0)] {
        assert_eq!(
            activation_decision(Some(&current), &candidate),
            Decision::Refused(Refusal::LowerToken)
        );
    }
}

#[test]
fn f84_higher_fencing_token_wins_whoever_holds_it() {
    let current = act("a", 2, 5);
    for candidate in [act("a", 2, 6), act("b", 1, 6), act("c", 9, u64::MAX)] {
        assert_eq!(
            activation_decision(Some(&current), &candidate),
            Decision::Supersedes
        );
    }
}

#[test]
fn f84_equal_token_needs_both_holder_and_epoch() {
    let current = act("a", 2, 5);
    assert_eq!(
        activation_decision(Some(&current), &act("a", 2, 5)),
        Decision::Reaffirms
    );
    assert_eq!(
        activation_decision(Some(&current), &act("b", 2, 5)),
        Decision::Refused(Refusal::EqualTokenOtherHolder)
    );
    assert_eq!(
        activation_decision(Some(&current), &act("a", 3, 5)),
        Decision::Refused(Refusal::EqualTokenOtherEpoch)
    );
    // Holder differs and epoch differs: still the holder refusal (checked first).
    assert_eq!(
        activation_decision(Some(&current), &act("b", 3, 5)),
        Decision::Refused(Refusal::EqualTokenOtherHolder)
    );
}

#[test]
fn f85_a_refused_activation_is_a_conflict_saying_the_replay_is_stale() {
    let current = act("a", 2, 5);
    let candidate = act("b", 2, 4);
    let Decision::Refused(why) = activation_decision(Some(&current), &candidate) else {
        panic!("expected a refusal");
    };
    let e = why.to_error(&current, &candidate);
    assert_eq!(e.code, ErrorCode::Conflict);
    assert!(e.message.contains("replay is stale"), "{e}");
    assert!(!Decision::Refused(why).accepted());
    assert!(Decision::First.accepted() && Decision::Supersedes.accepted());
}

#[test]
fn run_holder_grammar() {
    assert!(RunHolder::parse("u_x.manager.0123456789abcdef").is_ok());
    assert!(RunHolder::parse("").is_err());
    assert!(RunHolder::parse("a b").is_err());
    assert!(RunHolder::parse(&"a".repeat(257)).is_err());
    assert!(RunHolder::parse(&"a".repeat(256)).is_ok());
}

fn arb_activation() -> impl Strategy<Value = Activation> {
    (0u8..3, 0u64..3, 0u64..6).prop_map(|(h, e, t)| act(&format!("h{h}"), e, t))
}

proptest! {
    /// Fold any candidate sequence through the decision, as a journal would: the accepted
    /// token never decreases, and an accepted equal-token activation is always the same holder
    /// at the same epoch, so two drivers never both hold one token (F84).
    #[test]
    fn f84_accepted_tokens_are_monotone_and_equal_only_for_the_same_holder_and_epoch(
        candidates in proptest::collection::vec(arb_activation(), 0..40)
    ) {
        let mut current: Option<Activation> = None;
        for candidate in &candidates {
            let decision = activation_decision(current.as_ref(), candidate);
            match (&current, decision) {
                (None, d) => prop_assert_eq!(d, Decision::First),
                (Some(cur), Decision::Refused(_)) => {
                    prop_assert!(
                        candidate.fencing_token < cur.fencing_token
                            || (candidate.fencing_token == cur.fencing_token
                                && (candidate.holder != cur.holder || candidate.epoch != cur.epoch))
                    );
                }
                (Some(cur), Decision::Supersedes) => {
                    prop_assert!(candidate.fencing_token > cur.fencing_token);
                }
                (Some(cur), Decision::Reaffirms) => prop_assert_eq!(cur, candidate),
                (Some(_), Decision::First) => prop_assert!(false, "First with a current activation"),
            }
            if decision.accepted() {
                if let Some(cur) = &current {
                    prop_assert!(candidate.fencing_token >= cur.fencing_token);
                }
                current = Some(candidate.clone());
            }
        }
    }

    /// Two distinct activations never each win over the other: whichever the journal holds,
    /// at most one of them can take authority from it (at most one driver per run, F84).
    #[test]
    fn f84_two_distinct_activations_never_both_win_over_each_other(
        a in arb_activation(), b in arb_activation()
    ) {
        let a_over_b = activation_decision(Some(&b), &a).accepted();
        let b_over_a = activation_decision(Some(&a), &b).accepted();
        prop_assert!(a == b || !(a_over_b && b_over_a));
        prop_assert_eq!(a == b, a_over_b && b_over_a);
    }
}
