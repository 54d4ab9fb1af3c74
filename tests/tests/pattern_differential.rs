//! Differential test: baton's event-pattern matcher against moto's EventBridge.
//!
//! A fixed-seed generator makes (pattern, event) pairs over baton's normalised event (`source`,
//! `type`, `data`). Each pair is answered twice: by `baton_core::domain::pattern::Pattern::matches`, and by
//! moto, through a real rule on an event bus with an SQS queue target and a real PutEvents of the
//! event in EventBridge form (`type` becomes `detail-type`, `data` becomes `detail`). The answers
//! must agree on every pair.
//!
//! Batching: each chunk of pairs gets its own bus with one rule per pair, all targeting one queue.
//! Every rule also requires `"resources": ["pair-<i>"]` and each event carries its own pair's
//! marker, so a rule can only ever see its own event, and the message that reaches the queue
//! names the pair that matched. moto delivers to SQS inside PutEvents, so draining the queue after
//! the chunk's PutEvents sees every delivery.
//!
//! moto (5.2.5, `moto/events/models.py`, `EventPattern`) differs from the AWS documentation in
//! places. The generator stays out of those classes of case, each for the reason given:
//! - Python's `True == 1`: moto lets `[1]` match `true`, `[true]` match `1`, `numeric` match
//!   booleans, and `anything-but: [0]` exclude `false`. AWS keeps booleans and numbers apart. So
//!   booleans appear only in the field `b`, and no number condition ever targets `b`.
//! - moto flattens only objects, never arrays, so a nested pattern cannot reach into an array of
//!   objects (AWS matches per element). Events hold arrays of scalars only.
//! - moto keeps an empty object `{}` and an empty array `[]` as values: `exists: true` matches
//!   them, as does `anything-but`. For AWS neither holds a leaf. Events hold neither.
//! - moto's wildcard is a regex whose `.` does not match a newline. No string has one.
//! - moto's `cidr` uses Python's strict `ip_network`, which refuses a block with host bits set
//!   (`10.1.2.3/8`) and so matches nothing. Only canonical blocks are generated.
//! - moto validates almost no pattern (only empty arrays and non-array/object field values), so
//!   errors cannot be compared; every generated pattern is valid, and baton must accept it.
//! - moto's `cidr` hands the value to Python's `ip_address`, which takes integers too
//!   (`ip_address(0)` is 0.0.0.0), so it matches the number 0 against `0.0.0.0/0`. AWS matches
//!   `cidr` against address strings only. The `ip` field never holds a number.
//! - moto flattens keys with dots (`a.b` reaches `{"a": {"b": ..}}`). No name has a dot.
//!
//! Needs the emulator: run through `make test` or `tools/with-emulator.sh cargo test -p
//! baton-tests --test pattern_differential`.

use std::collections::BTreeSet;

use anyhow::{Context, Result, bail, ensure};
use aws_sdk_eventbridge::types::{PutEventsRequestEntry, Target};
use aws_sdk_sqs::types::QueueAttributeName;
use baton_core::domain::pattern::Pattern;
use baton_tests::{Emulator, unique_name};
use serde_json::{Map, Value, json};

const PAIRS: usize = 600;
/// The fixed seed. `BATON_DIFF_SEED=<u64>` explores another one; the run prints the seed it used.
const SEED: u64 = 0x5eed_ba70_2024_0001;
/// Pairs per event bus. moto checks every rule on a bus for every event, so smaller buses keep
/// that quadratic work small.
const CHUNK: usize = 100;

#[tokio::test]
#[expect(clippy::too_many_lines, reason = "the differential run: generate, compare, report")]
async fn baton_and_moto_agree_on_generated_patterns_and_events() -> Result<()> {
    let seed = match std::env::var("BATON_DIFF_SEED") {
        Ok(text) => text.parse().context("BATON_DIFF_SEED must be a u64")?,
        Err(_) => SEED,
    };
    let mut rng = Rng::new(seed);
    let pairs: Vec<(Value, Value)> = (0..PAIRS)
        .map(|_| {
            let event = gen_event(&mut rng);
            (gen_pattern(&mut rng, &event), event)
        })
        .collect();

    let mut baton_answers = Vec::with_capacity(PAIRS);
    for (i, (pattern, event)) in pairs.iter().enumerate() {
        let compiled = Pattern::parse(pattern)
            .map_err(|e| anyhow::anyhow!("generated pattern {i} refused by baton: {e}\n{pattern}"))?;
        baton_answers.push(compiled.matches(event));
    }

    let config = Emulator::from_env().sdk_config().await;
    let events = aws_sdk_eventbridge::Client::new(&config);
    let sqs = aws_sdk_sqs::Client::new(&config);

    let queue_url = sqs
        .create_queue()
        .queue_name(unique_name("pattern-diff"))
        .send()
        .await?
        .queue_url
        .context("CreateQueue returned no URL")?;
    let queue_arn = sqs
        .get_queue_attributes()
        .queue_url(&queue_url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await?
        .attributes
        .and_then(|mut a| a.remove(&QueueAttributeName::QueueArn))
        .context("GetQueueAttributes returned no QueueArn")?;

    let mut moto_matched = BTreeSet::new();
    for (chunk_index, chunk) in pairs.chunks(CHUNK).enumerate() {
        let bus = unique_name("pattern-diff");
        events.create_event_bus().name(&bus).send().await?;
        let first = chunk_index * CHUNK;

        for (offset, (pattern, _)) in chunk.iter().enumerate() {
            let i = first + offset;
            let rule = marker(i);
            let mut eventbridge_pattern = to_eventbridge(pattern)?;
            eventbridge_pattern.insert("resources".to_owned(), json!([marker(i)]));
            events
                .put_rule()
                .name(&rule)
                .event_bus_name(&bus)
                .event_pattern(Value::Object(eventbridge_pattern).to_string())
                .send()
                .await
                .with_context(|| format!("PutRule for pair {i}: {pattern}"))?;
            events
                .put_targets()
                .rule(&rule)
                .event_bus_name(&bus)
                .targets(Target::builder().id("queue").arn(&queue_arn).build()?)
                .send()
                .await?;
        }

        let entries: Vec<PutEventsRequestEntry> = chunk
            .iter()
            .enumerate()
            .map(|(offset, (_, event))| to_entry(&bus, first + offset, event))
            .collect::<Result<_>>()?;
        for batch in entries.chunks(10) {
            let answer = events.put_events().set_entries(Some(batch.to_vec())).send().await?;
            ensure!(answer.failed_entry_count == 0, "PutEvents refused entries: {:?}", answer.entries);
        }

        drain(&sqs, &queue_url, &mut moto_matched).await?;
    }

    let mut disagreements = Vec::new();
    for (i, ((pattern, event), baton)) in pairs.iter().zip(&baton_answers).enumerate() {
        let moto = moto_matched.contains(&i);
        if moto != *baton {
            disagreements.push(format!(
                "pair {i}: baton {baton}, moto {moto}\n  pattern {pattern}\n  event   {event}"
            ));
        }
    }
    let matched = baton_answers.iter().filter(|m| **m).count();
    println!(
        "compared {PAIRS} (pattern, event) pairs with moto (seed {seed}): {matched} match, {} do \
         not, {} disagreements",
        PAIRS - matched,
        disagreements.len()
    );
    sqs.delete_queue().queue_url(&queue_url).send().await?;

    // A generator that made everything match (or nothing) would compare very little.
    ensure!(
        matched >= PAIRS / 5 && PAIRS - matched >= PAIRS / 5,
        "the generator is lopsided: {matched} of {PAIRS} pairs match"
    );
    if !disagreements.is_empty() {
        bail!(
            "{} of {PAIRS} pairs disagree; the first ones:\n{}",
            disagreements.len(),
            disagreements.iter().take(15).cloned().collect::<Vec<_>>().join("\n")
        );
    }
    Ok(())
}

/// The rule name, and the `resources` entry that ties a delivered event to its pair.
fn marker(i: usize) -> String {
    format!("pair-{i}")
}

/// baton patterns address the normalised event; EventBridge patterns address its envelope.
/// Only the top level (and the `$or` branches at the top level) carry envelope names.
fn to_eventbridge(pattern: &Value) -> Result<Map<String, Value>> {
    let Value::Object(fields) = pattern else { bail!("pattern is not an object: {pattern}") };
    fields
        .iter()
        .map(|(key, value)| {
            Ok(match key.as_str() {
                "type" => ("detail-type".to_owned(), value.clone()),
                "data" => ("detail".to_owned(), value.clone()),
                "$or" => {
                    let Value::Array(branches) = value else { bail!("$or is not an array") };
                    let branches = branches
                        .iter()
                        .map(|b| to_eventbridge(b).map(Value::Object))
                        .collect::<Result<Vec<_>>>()?;
                    (key.clone(), Value::Array(branches))
                }
                _ => (key.clone(), value.clone()),
            })
        })
        .collect()
}

fn to_entry(bus: &str, i: usize, event: &Value) -> Result<PutEventsRequestEntry> {
    let text = |name: &str| {
        event[name].as_str().map(str::to_owned).with_context(|| format!("event {i} has no string {name}"))
    };
    Ok(PutEventsRequestEntry::builder()
        .event_bus_name(bus)
        .source(text("source")?)
        .detail_type(text("type")?)
        .detail(event["data"].to_string())
        .resources(marker(i))
        .build())
}

/// Receives every message now in the queue and records which pair each one belongs to.
async fn drain(sqs: &aws_sdk_sqs::Client, queue_url: &str, matched: &mut BTreeSet<usize>) -> Result<()> {
    loop {
        let messages = sqs
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(10)
            .visibility_timeout(600)
            .wait_time_seconds(0)
            .send()
            .await?
            .messages
            .unwrap_or_default();
        if messages.is_empty() {
            return Ok(());
        }
        for message in messages {
            let body: Value = serde_json::from_str(message.body().unwrap_or_default())?;
            let pair = body["resources"][0]
                .as_str()
                .and_then(|m| m.strip_prefix("pair-"))
                .and_then(|n| n.parse::<usize>().ok())
                .with_context(|| format!("delivered event has no pair marker: {body}"))?;
            ensure!(matched.insert(pair), "pair {pair} was delivered twice");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The generator. Field names have fixed kinds so booleans never meet number conditions (see the
// module doc); values come from small pools so exact conditions hit often.

/// xorshift64*: tiny, deterministic, good enough to spread cases.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())].clone()
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Text,
    Number,
    Flag,
    Address,
    Texts,
    Numbers,
    Nested,
}

const FIELDS: [(&str, Kind); 9] = [
    ("s1", Kind::Text),
    ("s2", Kind::Text),
    ("n1", Kind::Number),
    ("n2", Kind::Number),
    ("b", Kind::Flag),
    ("ip", Kind::Address),
    ("tags", Kind::Texts),
    ("nums", Kind::Numbers),
    ("obj", Kind::Nested),
];

const TEXTS: [&str; 18] = [
    "",
    "a",
    "ab",
    "abc",
    "Abc",
    "ABC",
    "b",
    "ba",
    "bab",
    "order.placed",
    "Order.Placed",
    "order.paid",
    "x*y",
    "x\\y",
    "a-b-c",
    "5",
    "café",
    "CAFÉ",
];
const SOURCES: [&str; 4] = ["shop", "shop.eu", "Shop", "billing"];
const TYPES: [&str; 4] = ["order.placed", "order.paid", "Order.Placed", "payment.settled"];
const ADDRESSES: [&str; 9] = [
    "10.0.0.1",
    "10.0.0.255",
    "10.0.1.7",
    "192.168.1.1",
    "172.16.0.1",
    "2001:db8::1",
    "2001:db9::1",
    "::1",
    "not-an-ip",
];
const BLOCKS: [&str; 6] =
    ["10.0.0.0/24", "10.0.0.0/8", "192.168.0.0/16", "2001:db8::/32", "0.0.0.0/0", "10.0.1.7/32"];

fn number(rng: &mut Rng) -> Value {
    match rng.below(12) {
        0 => json!(0),
        1 => json!(1),
        2 => json!(-1),
        3 => json!(5),
        4 => json!(5.0),
        5 => json!(2.5),
        6 => json!(-2.5),
        7 => json!(1000),
        8 => json!(999.99),
        9 => json!(1e6),
        10 => json!(0.1),
        _ => json!(rng.below(20) as i64 - 10),
    }
}

fn text(rng: &mut Rng, pool: &[&str]) -> String {
    rng.pick(pool).to_owned()
}

fn gen_event(rng: &mut Rng) -> Value {
    json!({
        "source": text(rng, &SOURCES),
        "type": text(rng, &TYPES),
        "data": gen_object(rng, 0),
    })
}

/// A non-empty object of vocabulary fields; arrays hold scalars only, objects are never empty.
fn gen_object(rng: &mut Rng, depth: usize) -> Value {
    let mut object = Map::new();
    for (name, kind) in FIELDS {
        if kind == Kind::Nested && depth >= 1 {
            continue;
        }
        if rng.chance(55) {
            object.insert(name.to_owned(), gen_value(rng, kind, depth));
        }
    }
    if object.is_empty() {
        object.insert("s1".to_owned(), json!(text(rng, &TEXTS)));
    }
    Value::Object(object)
}

fn gen_value(rng: &mut Rng, kind: Kind, depth: usize) -> Value {
    if rng.chance(10) {
        return Value::Null;
    }
    let cross_type = rng.chance(10);
    match kind {
        Kind::Text if cross_type => number(rng),
        Kind::Text => json!(text(rng, &TEXTS)),
        Kind::Number if cross_type => json!(rng.pick(&["5", "1000", "x"])),
        Kind::Number => number(rng),
        Kind::Flag if cross_type => json!("true"),
        Kind::Flag => json!(rng.chance(50)),
        Kind::Address if cross_type => json!("10.0.0.1/24"),
        Kind::Address => json!(text(rng, &ADDRESSES)),
        Kind::Texts => {
            let n = 1 + rng.below(3);
            Value::Array(
                (0..n)
                    .map(|_| match rng.below(10) {
                        0 => Value::Null,
                        1 => number(rng),
                        _ => json!(text(rng, &TEXTS)),
                    })
                    .collect(),
            )
        }
        Kind::Numbers => {
            let n = 1 + rng.below(3);
            Value::Array((0..n).map(|_| if rng.chance(10) { json!("5") } else { number(rng) }).collect())
        }
        Kind::Nested if cross_type => json!(text(rng, &TEXTS)),
        Kind::Nested => gen_object(rng, depth + 1),
    }
}

/// A pattern seeded from the event it will be tested against: fields it names are mostly ones
/// the event has, and string and number conditions mostly start from the event's own values, so
/// about half the pairs match and many others miss narrowly.
fn gen_pattern(rng: &mut Rng, event: &Value) -> Value {
    let mut pattern = gen_top_level(rng, event, 0);
    if rng.chance(15) {
        let n = 2 + rng.below(2);
        let branches = (0..n).map(|_| Value::Object(gen_top_level(rng, event, 1))).collect();
        pattern.insert("$or".to_owned(), Value::Array(branches));
    }
    if pattern.is_empty() {
        pattern.insert("data".to_owned(), gen_object_pattern(rng, event.get("data"), 0, 0));
    }
    Value::Object(pattern)
}

/// `source`, `type` and `data` rules; never empty when inside `$or`.
fn gen_top_level(rng: &mut Rng, event: &Value, or_depth: usize) -> Map<String, Value> {
    let mut fields = Map::new();
    if rng.chance(30) {
        let rule = gen_conditions(rng, Kind::Text, &SOURCES, event.get("source"));
        fields.insert("source".to_owned(), rule);
    }
    if rng.chance(30) {
        let rule = gen_conditions(rng, Kind::Text, &TYPES, event.get("type"));
        fields.insert("type".to_owned(), rule);
    }
    if rng.chance(80) || (or_depth > 0 && fields.is_empty()) {
        let rule = gen_object_pattern(rng, event.get("data"), 0, or_depth);
        fields.insert("data".to_owned(), rule);
    }
    fields
}

fn gen_object_pattern(rng: &mut Rng, actual: Option<&Value>, depth: usize, or_depth: usize) -> Value {
    let present: Vec<&str> = match actual {
        Some(Value::Object(object)) => object.keys().map(String::as_str).collect(),
        _ => Vec::new(),
    };
    let mut fields = Map::new();
    let wanted = if rng.chance(60) { 1 } else { 2 + rng.below(2) };
    while fields.len() < wanted {
        let (name, kind) = if !present.is_empty() && rng.chance(75) {
            let name = rng.pick(&present);
            FIELDS.into_iter().find(|(n, _)| *n == name).unwrap_or(FIELDS[0])
        } else {
            rng.pick(&FIELDS)
        };
        if kind == Kind::Nested && depth >= 1 {
            continue;
        }
        let value = actual.and_then(|a| a.get(name));
        let rule = match kind {
            Kind::Nested => gen_object_pattern(rng, value, depth + 1, or_depth),
            Kind::Address => gen_conditions(rng, kind, &ADDRESSES, value),
            _ => gen_conditions(rng, kind, &TEXTS, value),
        };
        fields.insert(name.to_owned(), rule);
    }
    if or_depth < 2 && rng.chance(15) {
        let n = 2 + rng.below(2);
        let branches = (0..n).map(|_| gen_object_pattern(rng, actual, depth, or_depth + 1)).collect();
        fields.insert("$or".to_owned(), Value::Array(branches));
    }
    Value::Object(fields)
}

fn gen_conditions(rng: &mut Rng, kind: Kind, pool: &[&str], actual: Option<&Value>) -> Value {
    let n = if rng.chance(60) { 1 } else { 2 + rng.below(2) };
    Value::Array((0..n).map(|_| gen_condition(rng, kind, pool, actual)).collect())
}

/// The event's own string or number at this field (one element of an array), if any.
fn seed<'a>(rng: &mut Rng, actual: Option<&'a Value>) -> Option<&'a Value> {
    match actual? {
        Value::Array(items) if !items.is_empty() => Some(&items[rng.below(items.len())]),
        Value::Array(_) => None,
        value => Some(value),
    }
}

fn gen_condition(rng: &mut Rng, kind: Kind, pool: &[&str], actual: Option<&Value>) -> Value {
    match rng.below(12) {
        0 => return json!({"exists": rng.chance(50)}),
        1 if rng.chance(40) => return Value::Null,
        _ => {}
    }
    let seeded = if rng.chance(65) { seed(rng, actual) } else { None };
    let seeded_number = seeded.filter(|v| v.is_number()).cloned();
    let seeded_text = seeded.and_then(Value::as_str).map(str::to_owned);
    match kind {
        Kind::Flag => match rng.below(3) {
            0 => json!({"anything-but": rng.pick(&["true", "false"])}),
            1 => json!({"anything-but": {"prefix": "t"}}),
            _ => json!(seeded.and_then(Value::as_bool).unwrap_or_else(|| rng.chance(50))),
        },
        Kind::Number | Kind::Numbers => {
            let near = seeded_number.unwrap_or_else(|| number(rng));
            match rng.below(10) {
                0..=2 => near,
                3..=5 => json!({"numeric": gen_numeric(rng, near.as_f64())}),
                6 => json!({"anything-but": near}),
                7 => json!({"anything-but": [near, number(rng)]}),
                8 => json!("5"),
                _ => json!({"prefix": "5"}),
            }
        }
        Kind::Address if rng.chance(50) => json!({"cidr": rng.pick(&BLOCKS)}),
        _ => {
            let s = seeded_text.unwrap_or_else(|| text(rng, pool));
            gen_string_condition(rng, &s, pool, seeded_number)
        }
    }
}

fn gen_string_condition(rng: &mut Rng, s: &str, pool: &[&str], number_seen: Option<Value>) -> Value {
    let chars: Vec<char> = s.chars().collect();
    let cut = rng.below(chars.len() + 1);
    let head: String = chars[..cut].iter().collect();
    let tail: String = chars[cut..].iter().collect();
    let nonempty = |part: &str| if part.is_empty() { "a".to_owned() } else { part.to_owned() };
    match rng.below(17) {
        0..=2 => json!(s),
        3 => json!({"prefix": head}),
        4 => json!({"suffix": tail}),
        5 => json!({"prefix": {"equals-ignore-case": swap_case(&head)}}),
        6 => json!({"suffix": {"equals-ignore-case": swap_case(&tail)}}),
        7 => json!({"equals-ignore-case": swap_case(s)}),
        8 => json!({"wildcard": gen_wildcard(rng, s)}),
        9 => json!({"anything-but": s}),
        10 => json!({"anything-but": [s, text(rng, pool)]}),
        11 => json!({"anything-but": {"prefix": nonempty(&head)}}),
        12 => json!({"anything-but": {"suffix": nonempty(&tail)}}),
        13 => json!({"anything-but": {"equals-ignore-case": [swap_case(s)]}}),
        14 => json!({"anything-but": {"wildcard": gen_wildcard(rng, s)}}),
        // Cross-type: a number where the field usually holds strings.
        15 => number_seen.unwrap_or_else(|| number(rng)),
        _ => json!({"numeric": gen_numeric(rng, number_seen.and_then(|n| n.as_f64()))}),
    }
}

fn swap_case(s: &str) -> String {
    s.chars()
        .map(
            |c| {
                if c.is_lowercase() {
                    c.to_uppercase().collect::<String>()
                } else {
                    c.to_lowercase().collect()
                }
            },
        )
        .collect()
}

/// A wildcard built from `s`: some runs of characters become `*` (never two stars in a row),
/// literal `*` and `\` are escaped, and sometimes one character is changed so it misses.
fn gen_wildcard(rng: &mut Rng, s: &str) -> String {
    let mut chars: Vec<char> = s.chars().collect();
    if !chars.is_empty() && rng.chance(25) {
        let at = rng.below(chars.len());
        chars[at] = 'q';
    }
    let mut out = String::new();
    let mut previous_was_star = false;
    let mut i = 0;
    while i <= chars.len() {
        if !previous_was_star && rng.chance(30) {
            out.push('*');
            previous_was_star = true;
            i += rng.below(3);
            continue;
        }
        let Some(c) = chars.get(i) else { break };
        if matches!(c, '*' | '\\') {
            out.push('\\');
        }
        out.push(*c);
        previous_was_star = false;
        i += 1;
    }
    out
}

/// One comparison, or a lower-then-upper range with lower < upper; bounds sit on or near `near`
/// when given, so the edges (open and closed) get exercised.
fn gen_numeric(rng: &mut Rng, near: Option<f64>) -> Value {
    let bound = |rng: &mut Rng| match near {
        Some(x) if rng.chance(60) => x + [-1.0, -0.5, 0.0, 0.0, 0.5, 1.0][rng.below(6)],
        _ => number(rng).as_f64().unwrap_or_default(),
    };
    if rng.chance(60) {
        let op = rng.pick(&["=", "<", "<=", ">", ">="]);
        return json!([op, bound(rng)]);
    }
    let a = bound(rng);
    let mut b = bound(rng);
    if a == b {
        b = a + 1.0;
    }
    let (low, high) = if a < b { (a, b) } else { (b, a) };
    json!([rng.pick(&[">", ">="]), low, rng.pick(&["<", "<="]), high])
}
