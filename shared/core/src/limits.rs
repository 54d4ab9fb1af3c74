//! The limits whose values depend on each other, in one place, with how they relate asserted at
//! compile time. Each is used where its doc says; the old homes re-export it.
//!
//! The timeouts of the functions are template.yaml's; `local/src/mapping.rs` tests that the
//! template keeps them equal to these.

use std::time::Duration as StdDuration;

use time::Duration;

/// The functions' timeout: template.yaml's `Globals.Function.Timeout`, which intake, progress and
/// callback keep (the queues' visibility timeouts sit above it).
pub const FUNCTION_TIMEOUT: StdDuration = StdDuration::from_secs(30);

/// The sweeper function's own timeout in template.yaml.
pub const SWEEPER_TIMEOUT: StdDuration = StdDuration::from_secs(60);

/// How often the sweeper runs: template.yaml's schedule for it (`rate(1 minute)`).
pub const SWEEP_INTERVAL: StdDuration = StdDuration::from_secs(60);

/// How late past its due time a retried step's next attempt may go out: a sweep starts at most
/// [`SWEEP_INTERVAL`] after it is due, and may take its whole timeout to reach it. Step Functions
/// hears nothing from the failed attempt's heartbeat (baton's own, sent as the attempt failed) to
/// the next attempt's (baton's again, sent as its task goes out), so `baton validate` holds every
/// wait between attempts plus this lag below the step's `heartbeat`.
pub const ATTEMPT_OPEN_LAG: StdDuration =
    StdDuration::from_secs(SWEEP_INTERVAL.as_secs() + SWEEPER_TIMEOUT.as_secs());

/// How far apart two clocks that baton compares may be: a function's and another's, or Step
/// Functions' (AWS keeps its hosts' clocks within about a second). A branch whose deadline is
/// within it of a group's timeout report may be the one that timed out (found by the
/// simulation, with a clock per function).
pub const MAX_CLOCK_SKEW: Duration = Duration::seconds(5);

/// How long after its execution ended a record may still wait for its report before the
/// sweeper strands it: past the longest a report takes to arrive when all is well but slow, the
/// state machine's own retry of the send (about 17 minutes, `asl.rs`) and the progress queue's
/// five receives of 3 minutes each before its dead-letter queue. A report past that is lost,
/// or in the dead-letter queue, and a person decides.
pub const STRANDED_AFTER: Duration = Duration::minutes(45);

/// Below this much time left, a batch takes no new message, and the message in flight is given
/// up: what is left is for giving the unfinished messages back (a requeue each, on their last
/// receive) and answering. A requeue is one SQS send, tens of milliseconds when SQS is well.
pub const DEADLINE_RESERVE: StdDuration = StdDuration::from_secs(5);

/// The give-back stops this long before the deadline, so the response reaches Lambda in time.
pub const ANSWER_MARGIN: StdDuration = StdDuration::from_secs(1);

/// How long a pending receipt is taken to mean that its attempt may still be at work: the
/// callback function's timeout. After it, the attempt has finished or died.
pub const RECEIPT_LEASE: Duration = Duration::seconds(30);

/// How long a sweep holds an entry's expiry before another may take it over: well past the
/// sweeper function's timeout, so the holder is gone by then.
pub const EXPIRY_LEASE: Duration = Duration::minutes(5);

/// How long a drain holds a buffered input before the sweeper finishes the drain for it: past
/// the longest run of anything that drains (a sweep). A drain whose invocation died, and whose
/// sender then gave up, would otherwise leave the input beside its waiting step until the
/// buffer expired (found by the simulation, seed 4675).
pub const DRAIN_LEASE: Duration = Duration::minutes(2);

/// How long a resume may stay owed (`advancing`) before the sweeper, or a retry of the input
/// that caused it, sends it again. Shorter than this, the first sender may still be at work.
pub const RESEND_RESUME_AFTER: Duration = Duration::seconds(30);

/// How long a record may sit in `pending` before the sweeper starts its execution again: past
/// the timeout of the intake invocation that may still be starting it.
pub const RESTART_PENDING_AFTER: Duration = Duration::minutes(2);

const fn secs(d: StdDuration) -> i64 {
    d.as_secs() as i64
}

// The give-back's margin fits inside the reserve it is taken from.
const _: () = assert!(ANSWER_MARGIN.as_millis() < DEADLINE_RESERVE.as_millis());
// A batch keeps some time for work: the reserve is a small part of the timeout.
const _: () = assert!(DEADLINE_RESERVE.as_secs() * 4 <= FUNCTION_TIMEOUT.as_secs());
// A receipt is taken over only once the callback invocation that holds it has surely ended.
const _: () = assert!(RECEIPT_LEASE.whole_seconds() >= secs(FUNCTION_TIMEOUT));
// An expiry is taken over only once the sweep that holds it has surely ended.
const _: () = assert!(EXPIRY_LEASE.whole_seconds() > secs(SWEEPER_TIMEOUT));
// A drain is finished by the sweeper only once whatever held it has surely ended.
const _: () = assert!(DRAIN_LEASE.whole_seconds() > secs(SWEEPER_TIMEOUT));
// A resume is sent again only once the intake, progress or callback invocation that owed it has
// surely ended. A sweep, which owes one when it drains an inbox, may run for its longer timeout:
// a resume it still sends after another sent it again is answered `TokenGone`, which settles the
// record the same way (`Engine::resume`), so the grace saves a call, it does not keep one.
const _: () = assert!(RESEND_RESUME_AFTER.whole_seconds() >= secs(FUNCTION_TIMEOUT));
// A record is stranded only once its report could no longer be on its way: the state machine's
// retry of the send (1 s doubling, 10 attempts: 1,023 s) and the progress queue's 5 receives of
// its 180 s visibility (template.yaml), with room to spare.
const _: () = assert!(STRANDED_AFTER.whole_seconds() > 1_023 + 5 * 180);
// A pending record is restarted only once the intake invocation starting it has surely ended.
const _: () = assert!(RESTART_PENDING_AFTER.whole_seconds() > secs(FUNCTION_TIMEOUT));
