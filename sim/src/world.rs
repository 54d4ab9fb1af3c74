//! The simulated world: a virtual clock, the seeded generator, the fault switch, and the
//! executor that interleaves every handler invocation at every port call.
//!
//! **Determinism.** One thread, no wall clock, no real I/O. Actors are futures polled in an
//! order the seed chooses; each port call begins with a [`Point`] that yields once, so any other
//! actor may run between two calls of one invocation. Nothing else yields: the use cases' code
//! is not aware of the simulation, it only sees its ports.
//!
//! **Crashes.** An actor suspended at a point may be dropped instead of polled: the invocation
//! died between its last effect and the next. What it owned (an SQS message in flight) comes
//! back when its visibility timeout passes, as on AWS.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};

use time::{Duration, OffsetDateTime};

use crate::rng::Rng;

pub type BoxFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The locks of the simulation's state. One thread runs a schedule, so a lock is never
/// contended and never waited for; what it costs is its atomic instructions, on every one of
/// the millions of locks a run takes. A spin lock is released with a plain store where
/// `std::sync::Mutex` swaps (a locked instruction, which also drains the core's stores), and
/// that swap and the lock's compare-and-swap were a tenth of the simulation's time
/// (docs/PERFORMANCE.md).
pub type Mutex<T> = spin::mutex::SpinMutex<T>;
pub type MutexGuard<'a, T> = spin::mutex::SpinMutexGuard<'a, T>;

/// Locks a mutex of the single-threaded world.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock()
}

/// How often each kind of fault strikes at a port call.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rates {
    /// An error before the call takes effect.
    pub before: f64,
    /// An error after the call took effect: its answer is lost.
    pub after: f64,
    /// The answer is lost and the SDK's own retry answers instead (a conditional write finds
    /// its own item).
    pub retried: f64,
    /// The invocation dies at a point (between two effects).
    pub crash: f64,
    /// The call is slow: the clock moves on while it runs.
    pub latency: f64,
    /// AWS throttles the call (rate or quota): an error before the effect that must never
    /// dead-letter the input.
    pub throttled: f64,
}

/// What happens to one port call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    None,
    Before,
    After,
    Retried,
    /// Throttled: refused before the effect, for rate or quota.
    Throttled,
}

/// Faults injected, by kind, and other counts a run reports.
#[derive(Debug, Clone, Default)]
pub struct Counts {
    pub faults: BTreeMap<&'static str, u64>,
}

impl Counts {
    pub fn add(&mut self, kind: &'static str) {
        *self.faults.entry(kind).or_insert(0) += 1;
    }
}

/// Whether an actor may crash: a Lambda invocation can, and is killed when it outlives its
/// function's timeout (30 s); a sender, a producer or an operator is outside baton and does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActorKind {
    Invocation,
    External,
}

/// The functions' timeout (template.yaml: 30 s; the sweeper's 60 s is not needed here).
pub const FUNCTION_TIMEOUT: Duration =
    Duration::seconds(baton_core::limits::FUNCTION_TIMEOUT.as_secs() as i64);

struct Actor {
    /// Its name, shared with the world's cast (a poll allocates nothing).
    name: Arc<str>,
    /// Its number in the world's cast.
    number: usize,
    kind: ActorKind,
    future: BoxFuture,
    /// Suspended at a point (so a crash lands between two effects), or not yet started: it can
    /// run now. An actor that is not is waiting for time to pass or for another actor.
    at_point: Arc<AtomicBool>,
    /// When Lambda kills the invocation: its function's timeout after it started (set when it
    /// is first polled: Lambda starts an invocation at once, whatever else runs).
    deadline: Option<OffsetDateTime>,
    /// Its scheduling priority (PCT): the executor mostly runs the highest, so one actor can
    /// take several steps in a row while another waits, which is how narrow races happen.
    priority: u64,
}

/// The world every port of the simulation shares.
pub struct World {
    pub rng: Mutex<Rng>,
    now: Mutex<OffsetDateTime>,
    pub rates: Mutex<Rates>,
    pub counts: Mutex<Counts>,
    /// The schedule, one readable line per step.
    pub log: Mutex<Vec<String>>,
    pub trace_on: bool,
    /// Every actor spawned, by its number: its name and its flag (`Actor::at_point`). The first
    /// stands for no actor (a future driven alone, or on tokio).
    cast: Mutex<Vec<(Arc<str>, Arc<AtomicBool>)>>,
    /// The number of the actor being polled (in `cast`): set on every poll, so a plain store.
    current: AtomicUsize,
    spawned: Mutex<Vec<Actor>>,
    next_id: AtomicU64,
    /// The port calls that passed their point: read on every step, to see whether it moved.
    points: AtomicU64,
    /// When sleeping actors wake: so an idle world can skip straight to the next wake.
    wakes: Mutex<Vec<OffsetDateTime>>,
    /// The actors asleep, with when they wake: once the clock reaches it, each can run again
    /// (its flag is raised), so a crowd of busy actors never keeps a sleeper from waking on time.
    sleepers: Mutex<Vec<(OffsetDateTime, Arc<AtomicBool>)>>,
    /// Actors that died (a crash, or Lambda's timeout) rather than finished.
    pub died: Mutex<std::collections::BTreeSet<String>>,
    /// The long quiet spells of the faulty phase: the clock jumped from one time to the other,
    /// with nothing run in between (no sweep either).
    pub jumps: Mutex<Vec<(OffsetDateTime, OffsetDateTime)>>,
    /// Faults a test asks for, by operation: the next call of that operation gets it.
    scripted: Mutex<Vec<(&'static str, Fault)>>,
    /// A spell in which every call of the operations with this prefix is throttled (a quota
    /// hit): from, until, prefix.
    pub throttle_spell: Mutex<Option<(OffsetDateTime, OffsetDateTime, &'static str)>>,
    /// Every throttle spell the schedule had, as it was set (for the checks, after the faults
    /// stop): from, until, prefix.
    pub spells: Mutex<Vec<(OffsetDateTime, OffsetDateTime, &'static str)>>,
    /// The cut-offs invocations race their work against (their deadline's timers), by id. The
    /// clock stops at the earliest until its racer has seen it: a timer fires on time, however
    /// slow the call it interrupts, where a latency fault would otherwise jump past it.
    cutoffs: Mutex<BTreeMap<u64, OffsetDateTime>>,
}

impl World {
    pub fn new(seed: u64, start: OffsetDateTime, trace_on: bool) -> Arc<World> {
        Arc::new(World {
            rng: Mutex::new(Rng::new(seed)),
            now: Mutex::new(start),
            rates: Mutex::new(Rates::default()),
            counts: Mutex::new(Counts::default()),
            log: Mutex::new(Vec::new()),
            trace_on,
            cast: Mutex::new(vec![(Arc::from(""), Arc::new(AtomicBool::new(false)))]),
            current: AtomicUsize::new(0),
            spawned: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(1),
            points: AtomicU64::new(0),
            wakes: Mutex::new(Vec::new()),
            sleepers: Mutex::new(Vec::new()),
            died: Mutex::new(std::collections::BTreeSet::new()),
            jumps: Mutex::new(Vec::new()),
            scripted: Mutex::new(Vec::new()),
            throttle_spell: Mutex::new(None),
            spells: Mutex::new(Vec::new()),
            cutoffs: Mutex::new(BTreeMap::new()),
        })
    }

    pub fn now(&self) -> OffsetDateTime {
        *lock(&self.now)
    }

    pub fn advance(&self, by: Duration) {
        let to = self.now() + by;
        self.set_now(to);
    }

    pub fn set_now(&self, to: OffsetDateTime) {
        let mut now = lock(&self.now);
        let cut = lock(&self.cutoffs).values().min().copied();
        let to = cut.map_or(to, |cut| to.min(cut.max(*now)));
        if to > *now {
            *now = to;
            lock(&self.sleepers).retain(|(at, flag)| {
                let awake = *at <= to;
                if awake {
                    flag.store(true, Ordering::Relaxed);
                }
                !awake
            });
        }
    }

    /// The actor being polled sleeps until `at`.
    fn sleeping(&self, at: OffsetDateTime) {
        let flag = self.polled(|(_, flag)| flag.clone());
        lock(&self.sleepers).push((at, flag));
    }

    /// Arms a cut-off at `at` (see `cutoffs`); the id disarms it.
    pub fn arm(&self, at: OffsetDateTime) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        lock(&self.cutoffs).insert(id, at);
        lock(&self.wakes).push(at);
        id
    }

    /// Disarms the cut-off `id`: its racer has seen it, or has finished first.
    pub fn disarm(&self, id: u64) {
        lock(&self.cutoffs).remove(&id);
    }

    /// The earliest time a sleeping actor wakes, after now.
    pub fn next_wake(&self) -> Option<OffsetDateTime> {
        let now = self.now();
        let mut wakes = lock(&self.wakes);
        wakes.retain(|&t| t > now);
        wakes.iter().min().copied()
    }

    /// Drops every actor spawned and not yet taken in: their futures hold the world (and the
    /// stack), which would otherwise keep each other alive after the schedule ends.
    pub fn drop_actors(&self) {
        let spawned = std::mem::take(&mut *lock(&self.spawned));
        drop(spawned);
    }

    /// How many port calls have passed their point.
    pub fn points(&self) -> u64 {
        self.points.load(Ordering::Relaxed)
    }

    /// A fresh number, for ids.
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    pub fn chance(&self, p: f64) -> bool {
        p > 0.0 && lock(&self.rng).chance(p)
    }

    pub fn below(&self, n: u64) -> u64 {
        lock(&self.rng).below(n)
    }

    /// Appends a line to the schedule (kept only when tracing).
    pub fn note(&self, line: impl FnOnce() -> String) {
        if self.trace_on {
            let at = self.now();
            let text = format!("{} {}", at.time(), line());
            lock(&self.log).push(text);
        }
    }

    /// `f` of the actor being polled: its name and its flag.
    fn polled<T>(&self, f: impl FnOnce(&(Arc<str>, Arc<AtomicBool>)) -> T) -> T {
        f(&lock(&self.cast)[self.current.load(Ordering::Relaxed)])
    }

    /// The actor being polled now.
    pub fn actor(&self) -> Arc<str> {
        self.polled(|(name, _)| name.clone())
    }

    /// The yield point that begins every port call: lets any other actor run first.
    pub fn point(&self, op: &'static str) -> Point<'_> {
        Point { world: self, op, yielded: false }
    }

    /// Marks the actor being polled as at a point (`true`: it stopped at one and can run on) or
    /// not (it passed it).
    fn at_point(&self, at: bool) {
        self.polled(|(_, flag)| flag.store(at, Ordering::Relaxed));
    }

    /// Makes the next call of `op` (e.g. `ddb.PutItem(record)`) get `fault`: for tests that
    /// place one failure exactly.
    pub fn script(&self, op: &'static str, fault: Fault) {
        lock(&self.scripted).push((op, fault));
    }

    /// What happens to the call `op` that just passed its point.
    pub fn fault(&self, op: &'static str) -> Fault {
        {
            let mut scripted = lock(&self.scripted);
            if let Some(i) = scripted.iter().position(|(o, _)| *o == op) {
                let (_, fault) = scripted.remove(i);
                drop(scripted);
                self.note(|| format!("  scripted fault {fault:?} on {op}"));
                return fault;
            }
        }
        let spell = *lock(&self.throttle_spell);
        if let Some((from, until, prefix)) = spell
            && op.starts_with(prefix)
            && (from..until).contains(&self.now())
        {
            lock(&self.counts).add("throttled");
            self.note(|| format!("  fault Throttled on {op} (a spell)"));
            return Fault::Throttled;
        }
        let rates = *lock(&self.rates);
        let mut rng = lock(&self.rng);
        let fault = if rng.chance(rates.before) {
            Fault::Before
        } else if rng.chance(rates.after) {
            Fault::After
        } else if rng.chance(rates.retried) {
            Fault::Retried
        } else if rng.chance(rates.throttled) {
            Fault::Throttled
        } else {
            Fault::None
        };
        // A slow call takes seconds, never more than the SDK's attempt timeout (10 s) before it
        // would fail instead.
        let slow = rng.chance(rates.latency).then(|| Duration::seconds(rng.range(1, 8)));
        drop(rng);
        if let Some(by) = slow {
            self.advance(by);
            lock(&self.counts).add("latency");
        }
        match fault {
            Fault::None => {}
            Fault::Before => lock(&self.counts).add("error_before_effect"),
            Fault::After => lock(&self.counts).add("error_after_effect"),
            Fault::Retried => lock(&self.counts).add("answer_lost_sdk_retried"),
            Fault::Throttled => lock(&self.counts).add("throttled"),
        }
        if fault != Fault::None {
            self.note(|| format!("  fault {fault:?} on {op}"));
        }
        fault
    }

    /// Starts an actor; the executor picks it up at its next step.
    pub fn spawn(&self, name: impl Into<String>, kind: ActorKind, future: BoxFuture) {
        let name: Arc<str> = name.into().into();
        self.note(|| format!("spawn {name}"));
        let deadline = None;
        let priority = lock(&self.rng).next_u64();
        let at_point = Arc::new(AtomicBool::new(true));
        let number = {
            let mut cast = lock(&self.cast);
            cast.push((name.clone(), at_point.clone()));
            cast.len() - 1
        };
        lock(&self.spawned).push(Actor { name, number, kind, future, at_point, deadline, priority });
    }
}

/// See [`World::point`]. Borrows the world and names nothing: the actor it stops is the one
/// being polled (a point is polled only by its own actor), looked up as it stops and goes on.
pub struct Point<'a> {
    world: &'a World,
    op: &'static str,
    yielded: bool,
}

impl Future for Point<'_> {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.yielded {
            self.world.at_point(false);
            self.world.points.fetch_add(1, Ordering::Relaxed);
            Poll::Ready(())
        } else {
            // Noted as the actor stops here, before the call: the schedule reads in the order
            // the calls are made.
            self.yielded = true;
            self.world.at_point(true);
            let op = self.op;
            self.world.note(|| format!("{}: {op}", self.world.actor()));
            // Ready to go on at once: an executor other than the simulation's (the model's
            // conformance test runs on tokio) polls again.
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

/// Runs one future to its end, alone: each point it passes yields once and is polled again.
/// For tests that drive the use cases step by step.
pub fn drive<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = Context::from_waker(std::task::Waker::noop());
    for _ in 0..1_000_000 {
        if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            return v;
        }
    }
    panic!("the future did not finish alone: it waits for time or another actor")
}

/// A future that waits until the clock reaches `at` (the executor moves the clock).
pub fn sleep_until(world: Arc<World>, at: OffsetDateTime) -> impl Future<Output = ()> + Send {
    lock(&world.wakes).push(at);
    let mut asleep = false;
    std::future::poll_fn(move |_| {
        if world.now() >= at {
            return Poll::Ready(());
        }
        if !asleep {
            asleep = true;
            world.sleeping(at);
        }
        Poll::Pending
    })
}

/// The executor: the live actors, polled in seeded order.
#[derive(Default)]
pub struct Executor {
    actors: Vec<Actor>,
}

impl Executor {
    /// Takes in the actors spawned since the last step.
    pub fn adopt(&mut self, world: &World) {
        self.actors.append(&mut lock(&world.spawned));
    }

    pub fn is_idle(&self, world: &World) -> bool {
        self.actors.is_empty() && lock(&world.spawned).is_empty()
    }

    /// The names of the live actors.
    pub fn names(&self) -> Vec<String> {
        self.actors.iter().map(|a| a.name.to_string()).collect()
    }

    /// How many actors can run now (those spawned and not yet taken in counted).
    pub fn runnable_count(&self, world: &World) -> usize {
        lock(&world.spawned).len() + self.actors.iter().filter(|a| a.at_point.load(Ordering::Relaxed)).count()
    }

    /// Can some actor run now (rather than wait for time to pass)?
    pub fn runnable(&self, world: &World) -> bool {
        !lock(&world.spawned).is_empty() || self.actors.iter().any(|a| a.at_point.load(Ordering::Relaxed))
    }

    /// Is a Lambda invocation in flight?
    pub fn invoking(&self, world: &World) -> bool {
        lock(&world.spawned).iter().chain(&self.actors).any(|a| a.kind == ActorKind::Invocation)
    }

    /// One step: poll one actor chosen by the seed, or crash it if it sits at a point and the
    /// dice say so. Returns whether anything moved (a point passed, an actor finished or
    /// crashed).
    pub fn step(&mut self, world: &Arc<World>) -> bool {
        self.adopt(world);
        // Poll an actor that can run: a sleeper would only say it is still asleep. (Counted, and
        // the highest priority found, in one pass: a crowd's actors are many, and a step is one
        // of them.)
        let can_run = |a: &Actor| a.at_point.load(Ordering::Relaxed);
        let (mut n, mut highest) = (0usize, None::<usize>);
        for (i, a) in self.actors.iter().enumerate() {
            if can_run(a) {
                n += 1;
                // The last of equal priorities, as `max_by_key` picks.
                if highest.is_none_or(|h| a.priority >= self.actors[h].priority) {
                    highest = Some(i);
                }
            }
        }
        let i = match n {
            0 if self.actors.is_empty() => return false,
            0 => world.below(self.actors.len() as u64) as usize,
            // Mostly the highest priority, sometimes anyone: long runs and fine interleavings.
            _ if world.chance(0.7) => highest.expect("a runnable actor"),
            n => {
                let k = world.below(n as u64) as usize;
                (0..self.actors.len()).filter(|&i| can_run(&self.actors[i])).nth(k).expect("a runnable actor")
            }
        };
        if world.chance(0.1) {
            self.actors[i].priority = lock(&world.rng).next_u64();
        }
        let crash = lock(&world.rates).crash;
        let actor = &self.actors[i];
        if actor.deadline.is_some_and(|d| world.now() > d) {
            let gone = self.actors.swap_remove(i);
            lock(&world.counts).add("function_timeout");
            world.note(|| format!("TIMEOUT {}: killed by Lambda", gone.name));
            lock(&world.died).insert(gone.name.to_string());
            return true;
        }
        if actor.kind == ActorKind::Invocation
            && actor.at_point.load(Ordering::Relaxed)
            && world.chance(crash)
        {
            let gone = self.actors.swap_remove(i);
            lock(&world.counts).add("crash");
            world.note(|| format!("CRASH {}", gone.name));
            lock(&world.died).insert(gone.name.to_string());
            return true;
        }
        let before = world.points();
        self.poll(world, i) || world.points() != before
    }

    /// Polls every actor once, in order; returns how many finished.
    pub fn round(&mut self, world: &Arc<World>) -> usize {
        self.adopt(world);
        let mut finished = 0;
        let mut i = 0;
        while i < self.actors.len() {
            if self.actors[i].deadline.is_some_and(|d| world.now() > d) {
                let gone = self.actors.swap_remove(i);
                world.note(|| format!("TIMEOUT {}: killed by Lambda", gone.name));
                lock(&world.died).insert(gone.name.to_string());
                finished += 1;
                continue;
            }
            if self.poll(world, i) {
                finished += 1;
            } else {
                i += 1;
            }
        }
        finished
    }

    /// Polls actor `i`; removes it when done. Returns whether it finished.
    fn poll(&mut self, world: &Arc<World>, i: usize) -> bool {
        let actor = &mut self.actors[i];
        if actor.kind == ActorKind::Invocation && actor.deadline.is_none() {
            actor.deadline = Some(world.now() + FUNCTION_TIMEOUT);
        }
        actor.at_point.store(false, Ordering::Relaxed);
        world.current.store(actor.number, Ordering::Relaxed);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let done = actor.future.as_mut().poll(&mut cx).is_ready();
        if done {
            let gone = self.actors.swap_remove(i);
            world.note(|| format!("done {}", gone.name));
        }
        done
    }
}
