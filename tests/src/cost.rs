//! What a workflow costs: the calls the emulator counted (`tools/emulator.py --count-calls`),
//! turned into billed units by AWS's rules, and into dollars at the published on-demand prices.
//! `make cost` prints it (src/bin/cost.rs); docs/COST.md has the model and the sources.
//!
//! moto returns a constant `ConsumedCapacity` (1.0 for a write, 0.5 for a read, whatever the
//! size), so DynamoDB's units are computed here from the items the emulator saw, with
//! [`item_size`] (DynamoDB's published size rules, tested in the store):
//! - a write consumes 1 write unit per 1 KB of the larger of the item before and after, at
//!   least 1; a write whose condition failed still consumes them, for the item as it stands;
//! - a global secondary index whose key attributes the item has is written too: an index entry
//!   put, updated or deleted is one write of its size; moving it (its key changed) is two;
//! - a read consumes 1 read unit per 4 KB of the items returned, summed over a Query (not per
//!   item), at least 1; half that when eventually consistent (every index read is).

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use baton_aws::dynamodb::{Item, item_size};
use serde_json::Value;

/// Write units for one write of an item of `bytes`.
pub fn write_units(bytes: usize) -> f64 {
    bytes.div_ceil(1024).max(1) as f64
}

/// Read units for reading `bytes` in one request.
pub fn read_units(bytes: usize, consistent: bool) -> f64 {
    let units = bytes.div_ceil(4096).max(1) as f64;
    if consistent { units } else { units / 2.0 }
}

/// An item in DynamoDB's JSON (`{"S": ".."}`, `{"N": ".."}`, ...) as the SDK holds it.
pub fn item_from_json(item: &Value) -> Item {
    item.as_object().map(|m| m.iter().map(|(k, v)| (k.clone(), attribute(v))).collect()).unwrap_or_default()
}

fn attribute(value: &Value) -> AttributeValue {
    let Some((kind, v)) = value.as_object().and_then(|m| m.iter().next()) else {
        return AttributeValue::Null(true);
    };
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let texts = |v: &Value| v.as_array().map(|a| a.iter().map(text).collect()).unwrap_or_default();
    let blob = |v: &Value| {
        use base64::Engine;
        Blob::new(base64::engine::general_purpose::STANDARD.decode(text(v)).unwrap_or_default())
    };
    match kind.as_str() {
        "S" => AttributeValue::S(text(v)),
        "N" => AttributeValue::N(text(v)),
        "B" => AttributeValue::B(blob(v)),
        "BOOL" => AttributeValue::Bool(v.as_bool().unwrap_or_default()),
        "SS" => AttributeValue::Ss(texts(v)),
        "NS" => AttributeValue::Ns(texts(v)),
        "BS" => AttributeValue::Bs(v.as_array().map(|a| a.iter().map(blob).collect()).unwrap_or_default()),
        "L" => AttributeValue::L(v.as_array().map(|a| a.iter().map(attribute).collect()).unwrap_or_default()),
        "M" => AttributeValue::M(item_from_json(v)),
        _ => AttributeValue::Null(true),
    }
}

/// A global secondary index: its key attributes. (baton's `by_due` projects ALL, so an entry is
/// the size of the item.)
#[derive(Debug, Clone)]
pub struct Index {
    pub keys: Vec<String>,
}

/// DynamoDB units, split as they are billed.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Units {
    pub table_writes: f64,
    pub index_writes: f64,
    pub reads: f64,
}

impl Units {
    /// Per workflow, of `workflows`.
    pub fn per(self, workflows: f64) -> Units {
        Units {
            table_writes: self.table_writes / workflows,
            index_writes: self.index_writes / workflows,
            reads: self.reads / workflows,
        }
    }
}

impl std::ops::AddAssign for Units {
    fn add_assign(&mut self, other: Units) {
        self.table_writes += other.table_writes;
        self.index_writes += other.index_writes;
        self.reads += other.reads;
    }
}

/// The units of one DynamoDB call the emulator kept (`GET /_baton/calls`, `dynamodb`).
pub fn units(call: &Value, indexes: &[Index]) -> Units {
    let image = |field: &str| call.get(field).filter(|v| v.is_object()).map(item_from_json);
    let ok = call["ok"].as_bool().unwrap_or(false);
    match call["operation"].as_str().unwrap_or_default() {
        "PutItem" | "UpdateItem" | "DeleteItem" => {
            let (before, after) = (image("before"), image("after"));
            let size = |i: &Option<Item>| i.as_ref().map_or(0, item_size);
            if !ok {
                return Units { table_writes: write_units(size(&before)), ..Units::default() };
            }
            let index_writes = indexes
                .iter()
                .map(|index| {
                    let key = |i: &Option<Item>| {
                        i.as_ref().and_then(|i| {
                            index.keys.iter().map(|k| i.get(k).cloned()).collect::<Option<Vec<_>>>()
                        })
                    };
                    match (key(&before), key(&after)) {
                        (Some(b), Some(a)) if a == b => write_units(size(&after)),
                        (Some(_), Some(_)) => write_units(size(&before)) + write_units(size(&after)),
                        (Some(_), None) => write_units(size(&before)),
                        (None, Some(_)) => write_units(size(&after)),
                        (None, None) => 0.0,
                    }
                })
                .sum();
            Units { table_writes: write_units(size(&before).max(size(&after))), index_writes, reads: 0.0 }
        }
        "GetItem" | "Query" | "Scan" if ok => {
            let items = call["items"].as_array().map(Vec::as_slice).unwrap_or_default();
            let bytes = items.iter().map(|i| item_size(&item_from_json(i))).sum();
            let consistent = call["consistent"].as_bool().unwrap_or(false) && call["index"].is_null();
            Units { reads: read_units(bytes, consistent), ..Units::default() }
        }
        _ => Units::default(),
    }
}

/// The longest task token Step Functions' API takes (`SendTaskSuccess`, `taskToken`: 1 to 2,048
/// characters, `TaskToken::MAX_LEN`). The emulator's tokens are UUIDs (36); AWS's are longer.
pub const AWS_TOKEN_CHARS: usize = baton_core::domain::ids::TaskToken::MAX_LEN;

/// `call` as it would be with AWS-length task tokens ([`AWS_TOKEN_CHARS`] characters of base64,
/// as AWS's look), and the calls the store would add for them. Such a token is longer than
/// `TOKEN_INLINE_MAX`, so the store keeps it out of the record (shared/aws/src/dynamodb.rs):
/// - the record carries `token_sk` (the token item's sort key, 58 characters) in place of the
///   token;
/// - a record write with a new token puts the token item first, whether the write then wins or
///   loses (a handler loads the record before it writes, and the load reads the token item, so
///   a write that keeps the token does not put it again);
/// - a load (a Query of the record and the item after it) returns the token item with the
///   record, in the same Query; any other read that returns a record with a token (a write that
///   lost and returned the record as it stands, a GetItem) reads its token item apart,
///   consistently.
pub fn with_aws_tokens(call: &Value) -> Vec<Value> {
    let sk = format!("RECORD#T#{}#{}", "f".repeat(16), "0".repeat(32));
    // An item's token, taken out and replaced by its token item's sort key, as the store writes
    // the record.
    let refer = |item: Option<&mut Value>| {
        let item = item.and_then(Value::as_object_mut)?;
        let token = item.remove("token")?;
        item.insert("token_sk".into(), serde_json::json!({"S": sk}));
        Some(token)
    };
    let mut call = call.clone();
    let (before, after) = (refer(call.get_mut("before")), refer(call.get_mut("after")));
    let mut reads = call
        .get_mut("items")
        .and_then(Value::as_array_mut)
        .map_or(0, |items| items.iter_mut().filter_map(|item| refer(Some(item))).count());
    let pk = ["after", "before", "key"]
        .iter()
        .find_map(|f| call[*f].get("pk").cloned())
        .or_else(|| call["items"].get(0).and_then(|i| i.get("pk")).cloned())
        .unwrap_or(Value::Null);
    let token_item = serde_json::json!({
        "pk": pk,
        "sk": {"S": sk},
        "token": {"B": "A".repeat(AWS_TOKEN_CHARS)},
        "expires_at": {"N": "1831234567"},
    });
    if call["operation"] == "Query" && reads > 0 {
        // The load's Query: the token item comes with the record.
        call["items"].as_array_mut().expect("a Query's items").push(token_item.clone());
        reads -= 1;
    }
    let ok = call["ok"].as_bool().unwrap_or(false);
    let mut calls = vec![call];
    if after.is_some() && before != after {
        calls.push(
            serde_json::json!({"operation": "PutItem", "ok": true, "before": null, "after": token_item}),
        );
    }
    if !ok && before.is_some() {
        reads += 1;
    }
    for _ in 0..reads {
        calls.push(serde_json::json!({"operation": "GetItem", "ok": true, "consistent": true, "items": [token_item]}));
    }
    calls
}

/// What a DynamoDB call was about, for the breakdown: `Operation item`, the item named by its
/// sort key (or, for a Query, the prefix of the sort keys it asked for) up to the first `#`
/// (`RECORD`, `TASK`, `RECEIPT`, `INBOX`, `LEDGER`), or the index.
pub fn item_kind(call: &Value) -> String {
    let operation = call["operation"].as_str().unwrap_or_default();
    let sk = ["after", "before", "key"].iter().find_map(|f| call[*f]["sk"]["S"].as_str());
    let sk = sk.or_else(|| call["prefix"].as_str());
    let item = match (call["index"].as_str(), sk) {
        (Some(index), _) => format!("index {index}"),
        (None, Some(sk)) => sk.split('#').next().unwrap_or(sk).to_owned(),
        (None, None) => "partition".to_owned(),
    };
    format!("{operation} {item}")
}

/// On-demand prices, us-east-1, in dollars per unit (docs/COST.md has each source and date).
pub mod price {
    /// Step Functions Standard, per state transition ($0.025 per 1,000).
    pub const STATE_TRANSITION: f64 = 0.025 / 1_000.0;
    /// Lambda, per request ($0.20 per million).
    pub const LAMBDA_REQUEST: f64 = 0.20 / 1e6;
    /// Lambda, arm64, per GB-second, first tier.
    pub const LAMBDA_ARM_GB_SECOND: f64 = 0.000_013_333_4;
    /// DynamoDB on-demand, per write request unit ($0.625 per million).
    pub const DYNAMODB_WRITE: f64 = 0.625 / 1e6;
    /// DynamoDB on-demand, per read request unit ($0.125 per million).
    pub const DYNAMODB_READ: f64 = 0.125 / 1e6;
    /// SQS standard, per request (64 KB chunk), after the free tier ($0.40 per million).
    pub const SQS_REQUEST: f64 = 0.40 / 1e6;
    /// API Gateway HTTP API, per request, first 300 million ($1.00 per million).
    pub const HTTP_API_REQUEST: f64 = 1.00 / 1e6;
}

/// Lambda memory (template.yaml `MemorySize`: 256 MB), in the GB Lambda bills GB-seconds in
/// (1,024 MB).
pub const LAMBDA_MEMORY_GB: f64 = 256.0 / 1024.0;
/// Billed duration assumed per invocation, seconds: baton's handlers spend their time waiting on
/// one to four AWS calls; docs/COST.md says why 50 ms.
pub const LAMBDA_SECONDS: f64 = 0.050;

/// What K workflows used, per workflow, and what a million cost.
#[derive(Debug, Clone, Default)]
pub struct PerWorkflow {
    pub workflows: u64,
    /// API calls by operation (`service:Operation`), every caller but the runner and the sweeper.
    pub calls: BTreeMap<String, f64>,
    pub state_transitions: f64,
    pub dynamodb: Units,
    pub sqs_requests: f64,
    /// Messages the event source mappings delivered to a function. `sqs_requests` and
    /// `lambda_invocations` hold a receive, a delete and an invocation for each: batches of one,
    /// as in a sequential run (see [`Self::in_batches_of`]).
    pub queue_messages: f64,
    pub lambda_invocations: f64,
    /// Messages and callbacks the functions handled, each billed [`LAMBDA_SECONDS`] of
    /// duration: a handler takes a batch's messages one after another (`sqs::process_batch`).
    pub handled: f64,
    pub http_requests: f64,
}

impl PerWorkflow {
    /// Dollars per million workflows, by service.
    pub fn dollars_per_million(&self) -> BTreeMap<&'static str, f64> {
        let m = 1e6;
        let d = &self.dynamodb;
        BTreeMap::from([
            ("Step Functions", m * self.state_transitions * price::STATE_TRANSITION),
            (
                "DynamoDB",
                m * ((d.table_writes + d.index_writes) * price::DYNAMODB_WRITE
                    + d.reads * price::DYNAMODB_READ),
            ),
            ("SQS", m * self.sqs_requests * price::SQS_REQUEST),
            (
                "Lambda",
                m * (self.lambda_invocations * price::LAMBDA_REQUEST
                    + self.handled * LAMBDA_MEMORY_GB * LAMBDA_SECONDS * price::LAMBDA_ARM_GB_SECOND),
            ),
            ("HTTP API", m * self.http_requests * price::HTTP_API_REQUEST),
        ])
    }
}

impl PerWorkflow {
    /// Dollars per million above Step Functions' own transitions, as a share of them (0.323 is
    /// 32.3 %).
    pub fn above_step_functions(&self) -> f64 {
        let sfn = self.dollars_per_million()["Step Functions"];
        (self.total_per_million() - sfn) / sfn
    }

    /// Dollars per million workflows, every service.
    pub fn total_per_million(&self) -> f64 {
        self.dollars_per_million().values().sum()
    }

    /// The same workflow counted as issue 15 counted its "about 25 %": the table's write units
    /// (its "about 19"), the reads, the SQS messages sent (`sends`), Lambda and the HTTP API, but
    /// not the index's write units nor the event source mappings' receives and deletes. From the
    /// issue's own counts this gives its 25 % (a test below), so the two are compared like for
    /// like; [`Self::above_step_functions`] of `self` is the whole bill.
    pub fn as_issue_15_counted(&self, sends: f64) -> PerWorkflow {
        PerWorkflow {
            dynamodb: Units { index_writes: 0.0, ..self.dynamodb },
            sqs_requests: sends,
            ..self.clone()
        }
    }

    /// The same workflow on busy queues, where each of an event source mapping's batches holds
    /// `batch` messages (`self` counts batches of one): a receive, a delete and an invocation per
    /// batch instead of per message. What a function does per message, and its duration, stay.
    pub fn in_batches_of(&self, batch: f64) -> PerWorkflow {
        let saved = self.queue_messages * (1.0 - 1.0 / batch);
        PerWorkflow {
            sqs_requests: self.sqs_requests - 2.0 * saved,
            lambda_invocations: self.lambda_invocations - saved,
            ..self.clone()
        }
    }
}

/// Calls counted by (caller, operation), from `GET /_baton/calls`.
pub fn counts(doc: &Value) -> HashMap<(String, String), u64> {
    doc["calls"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|c| {
            let text = |f: &str| c[f].as_str().unwrap_or_default().to_owned();
            ((text("caller"), text("operation")), c["count"].as_u64().unwrap_or(0))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn item(bytes: usize) -> Value {
        // "pk" (2) + "S" value: 2 + n bytes.
        json!({"pk": {"S": "x".repeat(bytes - 2)}})
    }

    #[test]
    fn writes_are_billed_per_kilobyte_of_the_larger_image_and_reads_per_four() {
        assert_eq!(write_units(0), 1.0);
        assert_eq!(write_units(1024), 1.0);
        assert_eq!(write_units(1025), 2.0);
        assert_eq!(read_units(4096, true), 1.0);
        assert_eq!(read_units(4097, true), 2.0);
        assert_eq!(read_units(10, false), 0.5);
        let put = json!({"operation": "UpdateItem", "ok": true, "before": item(1500), "after": item(900)});
        assert_eq!(units(&put, &[]).table_writes, 2.0, "the larger of before and after");
        let failed = json!({"operation": "PutItem", "ok": false, "before": item(3000), "after": item(3000)});
        assert_eq!(
            units(&failed, &[]),
            Units { table_writes: 3.0, ..Units::default() },
            "a failed condition is billed"
        );
        let create = json!({"operation": "PutItem", "ok": true, "before": null, "after": item(100)});
        assert_eq!(units(&create, &[]).table_writes, 1.0);
    }

    #[test]
    fn an_index_entry_costs_a_write_to_put_update_or_delete_and_two_to_move() {
        let index = [Index { keys: vec!["due_kind".into()] }];
        let with = |kind: Option<&str>, n: usize| {
            let mut v = item(n);
            if let Some(kind) = kind {
                v["due_kind"] = json!({"S": kind});
            }
            v
        };
        let write = |before: Value, after: Value| {
            units(&json!({"operation": "PutItem", "ok": true, "before": before, "after": after}), &index)
                .index_writes
        };
        assert_eq!(write(Value::Null, with(Some("a"), 100)), 1.0, "put");
        assert_eq!(write(with(Some("a"), 100), with(Some("a"), 2000)), 2.0, "updated in place, 2 KB");
        assert_eq!(write(with(Some("a"), 100), with(Some("b"), 100)), 2.0, "moved: delete and put");
        assert_eq!(write(with(Some("a"), 100), with(None, 100)), 1.0, "deleted");
        assert_eq!(write(with(None, 100), with(None, 100)), 0.0, "not in the index");
    }

    #[test]
    fn an_aws_length_token_is_modelled_as_the_store_keeps_it() {
        let sum = |calls: Vec<Value>| {
            let mut total = Units::default();
            for call in &calls {
                total += units(call, &[]);
            }
            (calls.len(), total)
        };
        let record = |token: Option<&str>| {
            let mut item = json!({"pk": {"S": "WF#order-review#k"}, "sk": {"S": "RECORD"}, "body": {"S": "x".repeat(600)}});
            if let Some(token) = token {
                item["token"] = json!({"S": token});
            }
            item
        };
        // A new token: the token item is put (two units: 1,536 bytes and its keys), then the
        // record, which stays one unit with the token's reference in place of the token.
        let step_ready =
            json!({"operation": "PutItem", "ok": true, "before": record(None), "after": record(Some("t1"))});
        assert_eq!(sum(with_aws_tokens(&step_ready)), (2, Units { table_writes: 3.0, ..Units::default() }));
        // The same token kept (a merge, a resume owed): the record alone.
        let merge = json!({"operation": "PutItem", "ok": true, "before": record(Some("t1")), "after": record(Some("t1"))});
        assert_eq!(sum(with_aws_tokens(&merge)), (1, Units { table_writes: 1.0, ..Units::default() }));
        // A load reads the token item in its Query, with the record: one read unit for both. A
        // GetItem of a record with a token reads the token item apart; one without does not.
        let load = json!({"operation": "Query", "ok": true, "consistent": true, "index": null,
            "prefix": "RECORD", "items": [record(Some("t1"))]});
        let modelled = with_aws_tokens(&load);
        assert_eq!(modelled[0]["items"].as_array().unwrap().len(), 2, "the record and its token item");
        assert_eq!(sum(modelled), (1, Units { reads: 1.0, ..Units::default() }));
        let get =
            json!({"operation": "GetItem", "ok": true, "consistent": true, "items": [record(Some("t1"))]});
        assert_eq!(sum(with_aws_tokens(&get)), (2, Units { reads: 2.0, ..Units::default() }));
        let plain = json!({"operation": "Query", "ok": true, "consistent": true, "index": null,
            "prefix": "RECORD", "items": [record(None)]});
        assert_eq!(with_aws_tokens(&plain), vec![plain]);
        // A lost write with a new token put the token item first; the record as it stands comes
        // back, and its token is read.
        let lost = json!({"operation": "PutItem", "ok": false, "before": record(Some("t1")), "after": record(Some("t2"))});
        let modelled: Vec<_> =
            with_aws_tokens(&lost).iter().map(|c| c["operation"].as_str().unwrap().to_owned()).collect();
        assert_eq!(modelled, ["PutItem", "PutItem", "GetItem"]);
    }

    #[test]
    fn the_modelled_token_item_is_the_size_of_the_one_the_store_writes() {
        use base64::Engine;
        use baton_core::domain::ids::{CorrelationKey, EventId, TaskToken, WorkflowName};
        use baton_core::domain::lifecycle::{Input, OnRestart, Plan, StepPlan, decide};
        let (w, k) = (WorkflowName::parse("order-review").unwrap(), CorrelationKey::parse("k").unwrap());
        let plan = Plan {
            steps: vec![StepPlan::requiring(&["decision"])],
            on_restart: OnRestart::AfterTerminal,
            version: String::new(),
        };
        // The time whose token item expires when the model's does (`expires_at` 1831234567): a
        // number's size in DynamoDB follows its digits, so a clock whose expiry ended in 0 made
        // the stored item a byte smaller (found flaky, about one run in ten).
        let now = time::OffsetDateTime::from_unix_timestamp(1_831_234_567).unwrap()
            - baton_aws::dynamodb::TOKEN_KEPT;
        let start = decide(&plan, (&w, &k), None, &Input::start(EventId::parse("e").unwrap()), now);
        let token = base64::engine::general_purpose::STANDARD.encode([7u8; 1536]);
        let token = TaskToken::parse(token).unwrap();
        assert_eq!(token.expose().len(), AWS_TOKEN_CHARS);
        let ready = Input::StepReady { generation: 1, step: 0, token: token.clone(), deadline: now };
        let pending = start.write.unwrap().to;
        let waiting = decide(&plan, (&w, &k), Some(&pending), &ready, now).write.unwrap().to;
        let stored = baton_aws::dynamodb::token_item(&waiting, &token);
        let step_ready = json!({"operation": "PutItem", "ok": true, "before": null,
            "after": {"pk": {"S": "WF#order-review#k"}, "token": {"S": "t"}}});
        let modelled = item_from_json(&with_aws_tokens(&step_ready)[1]["after"]);
        assert_eq!(item_size(&modelled), item_size(&stored));
    }

    #[test]
    fn query_reads_are_summed_before_rounding_and_index_reads_are_eventually_consistent() {
        let five = json!({"operation": "Query", "ok": true, "consistent": true, "index": null,
            "items": [item(1000), item(1000), item(1000), item(1000), item(1000)]});
        assert_eq!(units(&five, &[]).reads, 2.0, "5,000 bytes is two 4 KB units, not five");
        let on_index =
            json!({"operation": "Query", "ok": true, "consistent": false, "index": "by_due", "items": []});
        assert_eq!(units(&on_index, &[]).reads, 0.5);
        let missing = json!({"operation": "GetItem", "ok": true, "consistent": true, "items": []});
        assert_eq!(units(&missing, &[]).reads, 1.0, "a read of nothing still costs a unit");
    }

    #[test]
    fn issue_15_accounting_gives_its_25_percent_from_its_own_counts() {
        // The issue's counts for a two-step workflow before any cut: 3 transitions, about 19
        // write units (the table's), 2 Queries and several GetItems (8 read units, as measured
        // here), 5 SendMessage, one invocation per SQS message and callback (6), 1.5 callbacks.
        let before = PerWorkflow {
            workflows: 20,
            state_transitions: 3.0,
            dynamodb: Units { table_writes: 19.0, index_writes: 18.0, reads: 8.0 },
            sqs_requests: 14.5,
            queue_messages: 4.5,
            lambda_invocations: 6.0,
            handled: 6.0,
            http_requests: 1.5,
            ..PerWorkflow::default()
        };
        let counted = before.as_issue_15_counted(5.0);
        assert!((0.24..0.26).contains(&counted.above_step_functions()), "{}", counted.above_step_functions());
        assert!(
            before.above_step_functions() > 0.40,
            "the whole bill is more: {}",
            before.above_step_functions()
        );
        assert_eq!(counted.dynamodb.index_writes, 0.0);
        assert_eq!(counted.dynamodb.table_writes, 19.0);
    }

    #[test]
    fn full_batches_save_the_receives_deletes_and_invocations_but_not_the_duration() {
        // 5.5 messages sent, 4.5 of them delivered to a function; 1.5 callbacks.
        let one_by_one = PerWorkflow {
            state_transitions: 3.0,
            sqs_requests: 5.5 + 2.0 * 4.5,
            queue_messages: 4.5,
            lambda_invocations: 4.5 + 1.5,
            handled: 4.5 + 1.5,
            http_requests: 1.5,
            ..PerWorkflow::default()
        };
        let same = one_by_one.in_batches_of(1.0);
        assert_eq!((same.sqs_requests, same.lambda_invocations), (14.5, 6.0));
        let full = one_by_one.in_batches_of(10.0);
        assert!((full.sqs_requests - (5.5 + 2.0 * 0.45)).abs() < 1e-9, "{}", full.sqs_requests);
        assert!((full.lambda_invocations - (0.45 + 1.5)).abs() < 1e-9, "{}", full.lambda_invocations);
        let dollars = full.dollars_per_million();
        // $0.20 a million requests; 6 handlings of 50 ms at 0.25 GB, $0.0000133334 a GB-second.
        let lambda = 1.95 * 0.20 + 6.0 * 0.25 * 0.05 * 13.3334;
        assert!((dollars["Lambda"] - lambda).abs() < 1e-6, "{} != {lambda}", dollars["Lambda"]);
        assert!((dollars["SQS"] - 6.4 * 0.40).abs() < 1e-9, "{}", dollars["SQS"]);
        assert_eq!(dollars["HTTP API"], one_by_one.dollars_per_million()["HTTP API"]);
    }

    #[test]
    fn dynamodb_json_reads_back_to_the_sizes_dynamodb_bills() {
        let doc = json!({"pk": {"S": "abc"}, "n": {"N": "12345"}, "l": {"L": [{"S": "xy"}, {"NULL": true}]},
            "m": {"M": {"b": {"BOOL": true}}}});
        // pk 2+3; n 1+4; l 1+(3+(1+2)+(1+1)); m 1+(3+(1+1+1)).
        assert_eq!(item_size(&item_from_json(&doc)), 5 + 5 + 9 + 7);
    }
}
