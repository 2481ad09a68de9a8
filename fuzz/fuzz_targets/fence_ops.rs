//! Fence op sequences decoded from fuzz bytes and run through the shared scenario
//! (`cotal_tests::fence`): the invariant checker runs after every op and after the drain, and
//! any violation of F19–F23, F26 or Q-13 is a crash.
#![no_main]

use arbitrary::Arbitrary;
use cotal_tests::fence::{run_ops, Config, Op};
use libfuzzer_sys::fuzz_target;

/// Longest schedule run per input: long enough for several barriers and dozens of mints,
/// short enough to keep executions fast (the checker and the script replays are quadratic).
const MAX_OPS: usize = 256;

#[derive(Debug, Arbitrary)]
struct Input {
    config: Config,
    ops: Vec<Op>,
}

fuzz_target!(|input: Input| {
    let ops = input.ops.get(..MAX_OPS).unwrap_or(&input.ops);
    if let Err(violation) = run_ops(&input.config, ops) {
        panic!(
            "{violation}\nconfig: {:?}\nops: {ops:?}",
            input.config.normalized()
        );
    }
});
