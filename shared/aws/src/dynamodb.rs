//! The DynamoDB store: one table, everything about a (workflow, key) in one partition.
//!
//! docs/DATA_MODEL.md is the reference for the item layout, every access pattern and its
//! condition expression. In short:
//!
//! | item | pk | sk |
//! |---|---|---|
//! | record | `WF#<workflow>#<key>` | `RECORD` |
//! | task | same | `TASK#<generation:010>#<step:05>`, `#undo` for a compensation, `#a<attempt:02>` from the second attempt |
//! | receipt | same | `RECEIPT#<step name, /undo for a compensation>#<input id>` |
//! | inbox entry | same | `INBOX#<step name>#<input id>` (a callback's id marked with [`baton_core::ports::store::limits::CALLBACK_MARK`]) |
//! | ledger entry | same | `LEDGER#<reason>#<input id>` |
//! | task token (longer than [`TOKEN_INLINE_MAX`]) | same | `RECORD#T#<generation><step>#<ref>` (the numbers inverted, newest first) |
//!
//! The `by_due` index (`due_kind`, `due_at`) is what the sweeper and `baton status` query:
//! records under `record#<state>#<shard>`, buffered inbox entries under `inbox#buffered#<shard>`,
//! the shard a stable hash of `pk` modulo [`DynamoDbStore::with_due_shards`] (default
//! [`DEFAULT_DUE_SHARDS`]), so that no one index partition takes every transition of a state.
//! Every read queries all shards side by side.
//!
//! Every conditional write asks for `ALL_OLD` on failure, so a lost race returns the winner's
//! item with no second read. `ConditionalCheckFailedException` is interpreted in one place,
//! [`conditional`]. No transactions: each operation is one single-item request.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType,
    Projection, ProjectionType, ReturnValuesOnConditionCheckFailure, ScalarAttributeType, Select,
    TimeToLiveSpecification,
};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::sdk::{sdk_retryable, sdk_throttled};
use baton_core::domain::ids::{CorrelationKey, TaskToken, WorkflowName};
use baton_core::domain::lifecycle::{IgnoreReason, Kind, Record, Role, State, Wait, Write};
use baton_core::ports::store::compact;
use baton_core::ports::store::limits::{self, record_size_bound};
use baton_core::ports::store::limits::{RECORD_SK, inbox_sk, ledger_sk, pk, receipt_sk, task_sk};
use baton_core::ports::store::{
    Applied, BoundedCount, CONFIG_PK, Claim, Condition, Count, DrainTarget, Hold, InboxClaim, InboxEntry,
    InboxStatus, LedgerEntry, Receipt, ReceiptStatus, RecordHead, RegisteredConfig, StoreError, Task,
    TaskKind, Trace, WorkflowStore, condition_for,
};
use baton_core::ports::store::{DueList, ItemSizes, sort_trace};

/// A DynamoDB item, as the SDK holds it.
pub type Item = HashMap<String, AttributeValue>;

/// The global secondary index the sweeper and `baton status` query.
pub const DUE_INDEX: &str = "by_due";
/// The TTL attribute (epoch seconds) on receipts, inbox and ledger entries.
pub const TTL_ATTRIBUTE: &str = "expires_at";

/// A [`WorkflowStore`] on one DynamoDB table.
#[derive(Clone, Debug)]
pub struct DynamoDbStore {
    client: Client,
    table: String,
    due_shards: u32,
    /// Tokens longer than this are kept in a token item ([`TOKEN_INLINE_MAX`] unless told).
    token_inline_max: usize,
    /// Token items this instance has written or read (`pk` and sort key): a write of a record
    /// that refers to one of them need not put it again. Anything else is put first, which is
    /// idempotent, so forgetting only costs a write.
    known_tokens: Arc<Mutex<HashSet<String>>>,
}

/// Task tokens longer than this many bytes (characters, for Step Functions' ASCII tokens) are
/// kept out of the record, in a token item of their own ([`token_sk`]), and the record keeps
/// that item's sort key (`token_sk`). AWS's tokens run to
/// hundreds of characters (the API takes up to 2,048, [`TaskToken::MAX_LEN`]): inline, a waiting
/// or advancing record would pass one write unit, and its `by_due` entry with it. The emulator's
/// (UUIDs) stay inline. A parallel branch's and a compensation's tokens stay in the record's JSON
/// whatever their length.
pub const TOKEN_INLINE_MAX: usize = 128;

/// How long a token item is kept (TTL) after the write that put it: longer than a Standard
/// execution can run (one year), so the token is dead before its item goes. A record still
/// referring to it then reads without a token ([`parse_record`]).
pub const TOKEN_KEPT: time::Duration = time::Duration::days(400);

/// How many token items [`DynamoDbStore`] remembers before it starts over.
const KNOWN_TOKENS: usize = 4096;

/// How many partitions of the `by_due` index each state is spread over, by default
/// (`BATON_DUE_SHARDS`). docs/SCALE.md: one index partition takes about 1,000 writes a second.
pub const DEFAULT_DUE_SHARDS: u32 = 8;

/// The most shards a state may be spread over (each read queries them all).
pub const MAX_DUE_SHARDS: u32 = 256;

/// The `by_due` shard of the item partition `pk`: FNV-1a of its bytes, modulo `shards`. Stored
/// in items: it must never change.
pub fn due_shard(pk: &str, shards: u32) -> u32 {
    let hash = pk.bytes().fold(0x811c_9dc5_u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193));
    hash % shards.max(1)
}

/// The `due_kind` of an entry of `prefix` (`record#<state>`, `inbox#buffered`) in the partition
/// `pk`: `<prefix>#<shard>`.
pub fn due_kind(prefix: &str, pk: &str, shards: u32) -> String {
    format!("{prefix}#{}", due_shard(pk, shards))
}

/// The index partitions one `due_kind` prefix (`record#waiting`, `inbox#buffered`) is spread
/// over: one per shard.
pub fn due_partitions(prefix: &str, shards: u32) -> Vec<String> {
    (0..shards.max(1)).map(|n| format!("{prefix}#{n}")).collect()
}

impl DynamoDbStore {
    /// One conditional UpdateItem of an inbox entry: `update` when `condition` holds, otherwise
    /// the entry as it stands. `names` and `values` are the placeholders beyond `#status` and
    /// `:to`.
    async fn move_entry(
        &self,
        entry: &InboxEntry,
        (condition, update): (&str, &str),
        to: InboxStatus,
        names: &[(&str, &str)],
        values: Vec<(&str, AttributeValue)>,
    ) -> Result<Claim<InboxEntry>, StoreError> {
        let mut request = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(&pk(&entry.workflow, &entry.key)))
            .key("sk", s(&inbox_sk(entry)))
            .condition_expression(condition)
            .update_expression(update)
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":to", s(to.as_str()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        for (placeholder, name) in names {
            request = request.expression_attribute_names(*placeholder, *name);
        }
        for (placeholder, value) in values {
            request = request.expression_attribute_values(placeholder, value);
        }
        match conditional("UpdateItem", request.send().await)? {
            Ok(_) => Ok(Claim::Acquired),
            Err(Some(old)) if !old.is_empty() => parse_inbox(&old).map(Claim::Exists),
            Err(_) => Err(StoreError::Corrupt {
                pk: pk(&entry.workflow, &entry.key),
                sk: inbox_sk(entry),
                problem: "the inbox entry to move does not exist".into(),
            }),
        }
    }

    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoDbStore {
            client,
            table: table.into(),
            due_shards: DEFAULT_DUE_SHARDS,
            token_inline_max: TOKEN_INLINE_MAX,
            known_tokens: Arc::default(),
        }
    }

    /// The store spreading each state's `by_due` entries over `shards` index partitions. Only
    /// ever raise it: entries on a shard at or above a lower count would not be read.
    pub fn with_due_shards(self, shards: u32) -> Self {
        DynamoDbStore { due_shards: shards.clamp(1, MAX_DUE_SHARDS), ..self }
    }

    fn layout(&self) -> Layout {
        Layout { shards: self.due_shards, token_inline_max: self.token_inline_max }
    }

    /// The store keeping tokens longer than `chars` in token items (`BATON_TOKEN_INLINE_MAX`;
    /// 0 keeps every token there, as the end-to-end tests do with the emulator's short ones).
    pub fn with_token_inline_max(self, chars: usize) -> Self {
        DynamoDbStore { token_inline_max: chars, ..self }
    }

    pub fn table(&self) -> &str {
        &self.table
    }

    /// The most `by_due` shards any function has written with, as they registered it beside
    /// their config version ([`WorkflowStore::register_config`]); None before any registration.
    /// An operator command reads every one of them, whatever its own environment says.
    pub async fn registered_due_shards(&self) -> Result<Option<u32>, StoreError> {
        let items = self.query_partition(CONFIG_PK, Some("VERSION#")).await?;
        Ok(items
            .iter()
            .filter_map(|item| item.get("due_shards")?.as_ns().ok())
            .flatten()
            .filter_map(|n| n.parse::<u32>().ok())
            .max())
    }

    /// Creates the table as template.yaml declares it (keys, the `by_due` index, TTL). For tests
    /// and the local runtime; production tables come from the SAM template.
    pub async fn create_table(&self) -> Result<(), StoreError> {
        let key = |name: &str, kind| {
            KeySchemaElement::builder()
                .attribute_name(name)
                .key_type(kind)
                .build()
                .map_err(rejected("CreateTable"))
        };
        let attr = |name: &str| {
            AttributeDefinition::builder()
                .attribute_name(name)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .map_err(rejected("CreateTable"))
        };
        let gsi = GlobalSecondaryIndex::builder()
            .index_name(DUE_INDEX)
            .key_schema(key("due_kind", KeyType::Hash)?)
            .key_schema(key("due_at", KeyType::Range)?)
            .projection(Projection::builder().projection_type(ProjectionType::All).build())
            .build()
            .map_err(rejected("CreateTable"))?;
        self.client
            .create_table()
            .table_name(&self.table)
            .billing_mode(BillingMode::PayPerRequest)
            .key_schema(key("pk", KeyType::Hash)?)
            .key_schema(key("sk", KeyType::Range)?)
            .attribute_definitions(attr("pk")?)
            .attribute_definitions(attr("sk")?)
            .attribute_definitions(attr("due_kind")?)
            .attribute_definitions(attr("due_at")?)
            .global_secondary_indexes(gsi)
            .send()
            .await
            .map_err(sdk("CreateTable"))?;
        let ttl = TimeToLiveSpecification::builder()
            .attribute_name(TTL_ATTRIBUTE)
            .enabled(true)
            .build()
            .map_err(rejected("UpdateTimeToLive"))?;
        self.client
            .update_time_to_live()
            .table_name(&self.table)
            .time_to_live_specification(ttl)
            .send()
            .await
            .map_err(sdk("UpdateTimeToLive"))?;
        Ok(())
    }

    /// The token items this instance knows exist, by `pk#sk`.
    fn known_tokens(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.known_tokens.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What [`Self::known_tokens`] calls the token item `sk` in the partition `pk`.
    fn known_token(pk: &str, sk: &str) -> String {
        format!("{pk}#{sk}")
    }

    /// Notes that the token item `id` ([`Self::known_token`]) exists.
    fn remember_token(&self, id: String) {
        let mut known = self.known_tokens();
        if known.len() >= KNOWN_TOKENS {
            known.clear();
        }
        known.insert(id);
    }

    /// Puts the token item a write of `record` refers to, unless this instance knows it exists.
    /// Before the record write, so that a stored record never refers to a missing token item; a
    /// record write that then loses or fails leaves the token item unreferenced, until its TTL.
    async fn put_token(&self, record: &Record) -> Result<(), StoreError> {
        let Some(token) = step_token(record).filter(|t| self.layout().token_out_of_line(t)) else {
            return Ok(());
        };
        let id = Self::known_token(&pk(&record.workflow, &record.key), &token_sk(record, token));
        if self.known_tokens().contains(&id) {
            return Ok(());
        }
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(token_item(record, token)))
            .send()
            .await
            .map_err(sdk("PutItem"))?;
        self.remember_token(id);
        Ok(())
    }

    /// The record `item` holds, with its task token when it is kept out of line: from `read`,
    /// when that is its token item (read in the same Query, [`WorkflowStore::load`]), else from
    /// one consistent GetItem.
    async fn record_from(&self, item: &Item, read: Option<&Item>) -> Result<Record, StoreError> {
        let Some(token_sk) = referred_token_sk(item) else {
            return parse_record(item, None);
        };
        let pk = Reader { item }.s("pk")?;
        let fetched;
        let token_item = match read.filter(|t| t.get("sk").and_then(|v| v.as_s().ok()) == Some(&token_sk)) {
            Some(read) => Some(read),
            None => {
                fetched = self
                    .client
                    .get_item()
                    .table_name(&self.table)
                    .key("pk", s(pk))
                    .key("sk", s(&token_sk))
                    .consistent_read(true)
                    .send()
                    .await
                    .map_err(sdk("GetItem"))?
                    .item;
                fetched.as_ref()
            }
        };
        match token_item {
            Some(_) => self.remember_token(Self::known_token(pk, &token_sk)),
            None => tracing::warn!(pk, token_item = %token_sk,
                "token_item_missing: the record's task token expired with its item; it reads without one"),
        }
        parse_record(item, token_item)
    }

    /// [`Self::record_from`] for each of `items`, in order, a few at a time.
    async fn records_from(&self, items: &[Item]) -> Result<Vec<Record>, StoreError> {
        let mut records = Vec::with_capacity(items.len());
        for chunk in items.chunks(16) {
            records.extend(
                futures::future::try_join_all(chunk.iter().map(|item| self.record_from(item, None))).await?,
            );
        }
        Ok(records)
    }

    /// A put-if-absent of `item`, returning the stored item when it already exists.
    async fn put_if_absent(&self, op: &'static str, item: Item) -> Result<Option<Item>, StoreError> {
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            // Rule: an item is created once; a second put must not overwrite it.
            .condition_expression("attribute_not_exists(pk)")
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match conditional(op, result)? {
            Ok(_) => Ok(None),
            Err(existing) => Ok(Some(existing.unwrap_or_default())),
        }
    }

    /// Every item of a partition (with a sort key starting with `prefix`, when given), read
    /// strongly consistently, all pages.
    async fn query_partition(&self, pk: &str, prefix: Option<&str>) -> Result<Vec<Item>, StoreError> {
        let mut items = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let mut query = self
                .client
                .query()
                .table_name(&self.table)
                .expression_attribute_names("#pk", "pk")
                .expression_attribute_values(":pk", s(pk))
                .consistent_read(true)
                .set_exclusive_start_key(start);
            query = match prefix {
                Some(prefix) => query
                    .key_condition_expression("#pk = :pk AND begins_with(#sk, :prefix)")
                    .expression_attribute_names("#sk", "sk")
                    .expression_attribute_values(":prefix", s(prefix)),
                None => query.key_condition_expression("#pk = :pk"),
            };
            let page = query.send().await.map_err(sdk("Query"))?;
            items.extend(page.items.unwrap_or_default());
            start = page.last_evaluated_key;
            if start.is_none() {
                return Ok(items);
            }
        }
    }

    /// The records most recently written in each state, newest first across states, at most
    /// `limit`: what `baton local`'s console lists. A Query of the `by_due` index per state,
    /// newest `due_at` first, never a Scan; a waiting record's `due_at` is its deadline, so among
    /// waiting records those with the latest deadlines are the ones read.
    pub async fn recent_records(&self, limit: usize) -> Result<Vec<Record>, StoreError> {
        let far = OffsetDateTime::now_utc() + time::Duration::days(36_500);
        let mut records = Vec::new();
        for kind in Kind::ALL {
            let prefixes: Vec<String> = DueList::of_state(kind).into_iter().map(DueList::prefix).collect();
            let items = self.query_due_all(&prefixes, far, limit, Order::NewestFirst).await?;
            records.extend(self.records_from(&items).await?);
        }
        records.sort_by_key(|r| std::cmp::Reverse(r.updated_at));
        records.truncate(limit);
        Ok(records)
    }

    /// [`Self::query_due`] on every partition of each of `prefixes`, side by side, merged in
    /// `order` and cut to `limit`.
    async fn query_due_all(
        &self,
        prefixes: &[String],
        before: OffsetDateTime,
        limit: usize,
        order: Order,
    ) -> Result<Vec<Item>, StoreError> {
        let partitions: Vec<String> =
            prefixes.iter().flat_map(|p| due_partitions(p, self.due_shards)).collect();
        let queries = partitions.iter().map(|p| self.query_due(p, before, limit, order));
        let mut items: Vec<Item> =
            futures::future::try_join_all(queries).await?.into_iter().flatten().collect();
        let due_at = |i: &Item| i.get("due_at").and_then(|v| v.as_s().ok()).cloned().unwrap_or_default();
        items.sort_by_cached_key(due_at);
        if order == Order::NewestFirst {
            items.reverse();
        }
        items.truncate(limit);
        Ok(items)
    }

    /// How many entries the partitions of `prefix` hold, up to `up_to` ([`BoundedCount`]): the
    /// partitions of each round side by side.
    async fn count_due_all(&self, prefixes: &[String], up_to: u64) -> Result<Count, StoreError> {
        let partitions: Vec<String> =
            prefixes.iter().flat_map(|p| due_partitions(p, self.due_shards)).collect();
        let mut count = BoundedCount::new(partitions.len(), up_to);
        let mut starts: Vec<Option<Item>> = vec![None; partitions.len()];
        while let Some(reads) = count.round() {
            let answers = futures::future::try_join_all(
                reads.iter().map(|(i, limit)| self.count_due(&partitions[*i], *limit, starts[*i].clone())),
            )
            .await?;
            for ((i, _), (read, next)) in reads.into_iter().zip(answers) {
                count.answered(i, read, next.is_some());
                starts[i] = next;
            }
        }
        Ok(count.count())
    }

    /// A Query of the one `by_due` partition `due_kind` (`#kind`, `:kind`).
    fn due_query(&self, due_kind: &str) -> aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder {
        self.client
            .query()
            .table_name(&self.table)
            .index_name(DUE_INDEX)
            .expression_attribute_names("#kind", "due_kind")
            .expression_attribute_values(":kind", s(due_kind))
    }

    /// Counts up to `limit` entries of the partition `due_kind`, from `start`: how many, and
    /// where to go on from when it stopped at `limit` (DynamoDB may say so when nothing is left).
    async fn count_due(
        &self,
        due_kind: &str,
        limit: u64,
        mut start: Option<Item>,
    ) -> Result<(u64, Option<Item>), StoreError> {
        let mut total = 0u64;
        loop {
            let page = self
                .due_query(due_kind)
                .key_condition_expression("#kind = :kind")
                .select(Select::Count)
                .limit(i32::try_from(limit - total).unwrap_or(i32::MAX))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(sdk("Query"))?;
            total += u64::try_from(page.count).unwrap_or(0);
            start = page.last_evaluated_key;
            if start.is_none() || total >= limit {
                return Ok((total, start));
            }
        }
    }

    async fn query_due(
        &self,
        due_kind: &str,
        before: OffsetDateTime,
        limit: usize,
        order: Order,
    ) -> Result<Vec<Item>, StoreError> {
        let mut items = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let page = self
                .due_query(due_kind)
                .key_condition_expression("#kind = :kind AND #at <= :before")
                .expression_attribute_names("#at", "due_at")
                .expression_attribute_values(":before", s(&ts(before)))
                .scan_index_forward(order == Order::OldestFirst)
                .limit(i32::try_from(limit.saturating_sub(items.len()).max(1)).unwrap_or(i32::MAX))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(sdk("Query"))?;
            items.extend(page.items.unwrap_or_default());
            start = page.last_evaluated_key;
            if start.is_none() || items.len() >= limit {
                items.truncate(limit);
                return Ok(items);
            }
        }
    }
}

/// Which end of the `by_due` index a query reads from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Order {
    OldestFirst,
    NewestFirst,
}

/// Sorts a conditional write's result: success, a failed condition (with the item as it
/// stands, from ALL_OLD), or a real error. The one place that reads ConditionalCheckFailed.
fn conditional<T, E>(
    op: &'static str,
    result: Result<T, SdkError<E, HttpResponse>>,
) -> Result<Result<T, Option<Item>>, StoreError>
where
    E: ProvideErrorMetadata + ConditionFailure + std::error::Error + Send + Sync + 'static,
{
    match result {
        Ok(out) => Ok(Ok(out)),
        Err(SdkError::ServiceError(e)) if e.err().is_condition_failure() => Ok(Err(e.into_err().old_item())),
        Err(e) => Err(sdk(op)(e)),
    }
}

/// The operations whose errors can be a failed condition.
trait ConditionFailure {
    fn is_condition_failure(&self) -> bool;
    fn old_item(self) -> Option<Item>;
}

impl ConditionFailure for PutItemError {
    fn is_condition_failure(&self) -> bool {
        matches!(self, PutItemError::ConditionalCheckFailedException(_))
    }
    fn old_item(self) -> Option<Item> {
        match self {
            PutItemError::ConditionalCheckFailedException(e) => e.item,
            _ => None,
        }
    }
}

impl ConditionFailure for DeleteItemError {
    fn is_condition_failure(&self) -> bool {
        matches!(self, DeleteItemError::ConditionalCheckFailedException(_))
    }
    fn old_item(self) -> Option<Item> {
        match self {
            DeleteItemError::ConditionalCheckFailedException(e) => e.item,
            _ => None,
        }
    }
}

impl ConditionFailure for UpdateItemError {
    fn is_condition_failure(&self) -> bool {
        matches!(self, UpdateItemError::ConditionalCheckFailedException(_))
    }
    fn old_item(self) -> Option<Item> {
        match self {
            UpdateItemError::ConditionalCheckFailedException(e) => e.item,
            _ => None,
        }
    }
}

fn sdk<E>(op: &'static str) -> impl FnOnce(SdkError<E, HttpResponse>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    move |e| {
        if sdk_throttled(&e) {
            StoreError::Throttled { op, source: Box::new(e) }
        } else if sdk_retryable(&e) {
            StoreError::Unavailable { op, source: Box::new(e) }
        } else {
            StoreError::Rejected { op, source: Box::new(e) }
        }
    }
}

fn rejected<E: std::error::Error + Send + Sync + 'static>(op: &'static str) -> impl Fn(E) -> StoreError {
    move |e| StoreError::Rejected { op, source: Box::new(e) }
}

// ---- item size --------------------------------------------------------------------------------

pub use baton_core::ports::store::limits::MAX_ITEM_BYTES;

/// An item's size by DynamoDB's published rules (Developer Guide, "Item sizes and formats"):
/// each attribute's name in UTF-8 bytes plus its value: a string's UTF-8 bytes, a number's
/// `ceil(significant digits / 2) + 1`, a binary's bytes, 1 for a boolean or null, and for a
/// list or map 3 bytes plus 1 per element plus the elements. It is what write and read units
/// are billed on, and what the 400 KB limit applies to.
pub fn item_size(item: &Item) -> usize {
    item.iter().map(|(name, value)| name.len() + value_size(value)).sum()
}

fn value_size(value: &AttributeValue) -> usize {
    match value {
        AttributeValue::S(s) => s.len(),
        AttributeValue::N(n) => number_size(n),
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::Ss(v) => v.iter().map(String::len).sum(),
        AttributeValue::Ns(v) => v.iter().map(|n| number_size(n)).sum(),
        AttributeValue::Bs(v) => v.iter().map(|b| b.as_ref().len()).sum(),
        AttributeValue::L(items) => 3 + items.iter().map(|v| 1 + value_size(v)).sum::<usize>(),
        AttributeValue::M(map) => 3 + map.iter().map(|(k, v)| 1 + k.len() + value_size(v)).sum::<usize>(),
        _ => 0,
    }
}

fn number_size(n: &str) -> usize {
    // The digits counted in place, zeroes at either end left out (no copy: every record written
    // in the simulation is measured).
    let digits = || n.bytes().filter(u8::is_ascii_digit);
    let zero = |d: &u8| *d == b'0';
    let (total, leading) = (digits().count(), digits().take_while(zero).count());
    let trailing = if leading == total { 0 } else { digits().rev().take_while(zero).count() };
    let significant = (total - leading - trailing).max(1);
    significant.div_ceil(2) + 1
}

/// The size of a record's item, as the table stores it with the default [`TOKEN_INLINE_MAX`]
/// (a store told a higher limit keeps longer tokens inline, and writes larger records).
///
/// Summed attribute by attribute as [`record_item`] makes them, without building the item: the
/// simulation measures every record it writes.
pub fn record_size(record: &Record) -> usize {
    size_of(|size| record_attributes(record, Layout { shards: MAX_DUE_SHARDS, ..Layout::default() }, size))
}

/// The size of a task's item ([`item_size`]): what the in-memory store checks against
/// [`MAX_ITEM_BYTES`], as DynamoDB checks the item this store writes.
pub fn task_size(task: &Task) -> usize {
    size_of(|size| task_attributes(task, size))
}

/// The size of a receipt's item ([`task_size`]).
pub fn receipt_size(receipt: &Receipt) -> usize {
    size_of(|size| receipt_attributes(receipt, size))
}

/// The size of an inbox entry's item ([`task_size`]).
pub fn inbox_size(entry: &InboxEntry) -> usize {
    size_of(|size| inbox_attributes(entry, MAX_DUE_SHARDS, size))
}

/// The size of a ledger entry's item ([`task_size`]).
pub fn ledger_size(entry: &LedgerEntry) -> usize {
    size_of(|size| ledger_attributes(entry, size))
}

/// DynamoDB's rules for the size of each kind of item, as this store writes it: what the engine
/// trims a record to, and what the in-memory store holds items to when it stands in for DynamoDB
/// (the store contract and the simulation).
pub const ITEM_SIZES: ItemSizes = ItemSizes {
    record_bound: record_size_bound,
    record: record_size,
    task: task_size,
    receipt: receipt_size,
    inbox: inbox_size,
    ledger: ledger_size,
};
// ---- keys and attribute helpers -------------------------------------------------------------

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn json<T: Serialize + ?Sized>(v: &T) -> AttributeValue {
    // Serializing our own plain data types cannot fail; `Null` is a safe fallback regardless.
    AttributeValue::S(serde_json::to_string(v).unwrap_or_else(|_| "null".into()))
}

/// Fixed-width UTC timestamps, so that string order is time order in sort keys and indexes.
/// Written digit by digit: every record write formats three, and `format!` took a few thousand
/// instructions each.
pub fn ts(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    let mut out = String::with_capacity(27);
    match u32::try_from(t.year()) {
        Ok(year) if year <= 9999 => digits(&mut out, year, 4),
        _ => out.push_str(&format!("{:04}", t.year())),
    }
    let (month, day, hour, minute, second) = (u8::from(t.month()), t.day(), t.hour(), t.minute(), t.second());
    for (separator, n, width) in [
        ('-', month.into(), 2),
        ('-', day.into(), 2),
        ('T', hour.into(), 2),
        (':', minute.into(), 2),
        (':', second.into(), 2),
        ('.', t.microsecond(), 6),
    ] {
        out.push(separator);
        digits(&mut out, n, width);
    }
    out.push('Z');
    out
}

/// `n`'s last `width` decimal digits, zero-padded.
fn digits(out: &mut String, n: u32, width: u32) {
    for place in (0..width).rev() {
        out.push(char::from(b'0' + (n / 10u32.pow(place) % 10) as u8));
    }
}

fn epoch(t: OffsetDateTime) -> AttributeValue {
    n(t.unix_timestamp())
}

/// Reads typed attributes out of an item, naming the item and attribute when one is wrong.
struct Reader<'a> {
    item: &'a Item,
}

impl<'a> Reader<'a> {
    fn corrupt(&self, problem: String) -> StoreError {
        let get = |k: &str| self.item.get(k).and_then(|v| v.as_s().ok()).cloned().unwrap_or_default();
        StoreError::Corrupt { pk: get("pk"), sk: get("sk"), problem }
    }

    fn opt_s(&self, name: &str) -> Result<Option<&'a str>, StoreError> {
        match self.item.get(name) {
            None | Some(AttributeValue::Null(_)) => Ok(None),
            Some(AttributeValue::S(v)) => Ok(Some(v)),
            Some(_) => Err(self.corrupt(format!("attribute {name} is not a string"))),
        }
    }

    fn s(&self, name: &str) -> Result<&'a str, StoreError> {
        self.opt_s(name)?.ok_or_else(|| self.corrupt(format!("attribute {name} is missing")))
    }

    fn opt_n<T: std::str::FromStr>(&self, name: &str) -> Result<Option<T>, StoreError> {
        match self.item.get(name) {
            None | Some(AttributeValue::Null(_)) => Ok(None),
            Some(AttributeValue::N(v)) => v
                .parse()
                .map(Some)
                .map_err(|_| self.corrupt(format!("attribute {name} is not a valid number"))),
            Some(_) => Err(self.corrupt(format!("attribute {name} is not a number"))),
        }
    }

    fn n<T: std::str::FromStr>(&self, name: &str) -> Result<T, StoreError> {
        self.opt_n(name)?.ok_or_else(|| self.corrupt(format!("attribute {name} is missing")))
    }

    fn bool(&self, name: &str) -> Result<bool, StoreError> {
        match self.item.get(name) {
            Some(AttributeValue::Bool(b)) => Ok(*b),
            None => Ok(false),
            Some(_) => Err(self.corrupt(format!("attribute {name} is not a boolean"))),
        }
    }

    fn json<T: DeserializeOwned>(&self, name: &str) -> Result<T, StoreError> {
        serde_json::from_str(self.s(name)?).map_err(|e| self.corrupt(format!("attribute {name}: {e}")))
    }

    fn time(&self, name: &str) -> Result<OffsetDateTime, StoreError> {
        OffsetDateTime::parse(self.s(name)?, &Rfc3339)
            .map_err(|e| self.corrupt(format!("attribute {name}: {e}")))
    }

    fn opt_time(&self, name: &str) -> Result<Option<OffsetDateTime>, StoreError> {
        self.opt_s(name)?
            .map(|v| {
                OffsetDateTime::parse(v, &Rfc3339).map_err(|e| self.corrupt(format!("attribute {name}: {e}")))
            })
            .transpose()
    }

    fn epoch(&self, name: &str) -> Result<OffsetDateTime, StoreError> {
        OffsetDateTime::from_unix_timestamp(self.n(name)?)
            .map_err(|e| self.corrupt(format!("attribute {name}: {e}")))
    }

    fn id<T: std::str::FromStr<Err = baton_core::domain::ids::IdError>>(
        &self,
        name: &str,
    ) -> Result<T, StoreError> {
        self.s(name)?.parse().map_err(|e| self.corrupt(format!("attribute {name}: {e}")))
    }

    /// The (workflow, key) an item belongs to, from its `pk` (`WF#<workflow>#<key>`: neither
    /// may contain `#`).
    fn names(&self) -> Result<(WorkflowName, CorrelationKey), StoreError> {
        let pk = self.s("pk")?;
        let (workflow, key) = pk
            .strip_prefix("WF#")
            .and_then(|rest| rest.split_once('#'))
            .ok_or_else(|| self.corrupt(format!("pk {pk:?} is not WF#<workflow>#<key>")))?;
        let bad = |e: baton_core::domain::ids::IdError| self.corrupt(format!("pk {pk:?}: {e}"));
        Ok((workflow.parse().map_err(bad)?, key.parse().map_err(bad)?))
    }
}

/// The attributes every item starts with: its keys. The (workflow, key) it belongs to is read
/// back from `pk` ([`Reader::names`]).
fn base_item(workflow: &WorkflowName, key: &CorrelationKey, sk: &str) -> Item {
    item_of(|item| put_keys(item, (workflow, key), sk))
}

fn put_keys(item: &mut impl Attributes, (workflow, key): (&WorkflowName, &CorrelationKey), sk: &str) {
    item.put("pk", AttributeValue::S(pk(workflow, key)));
    item.put("sk", s(sk));
}

/// The item `put` fills: what is written, and, into a [`Size`], what is measured.
fn item_of(put: impl FnOnce(&mut Item)) -> Item {
    let mut item = Item::new();
    put(&mut item);
    item
}

fn size_of(put: impl FnOnce(&mut Size)) -> usize {
    let mut size = Size(0);
    put(&mut size);
    size.0
}

// ---- records ---------------------------------------------------------------------------------

fn record_item(r: &Record, layout: Layout) -> Item {
    item_of(|item| record_attributes(r, layout, item))
}

/// Where an item's attributes go ([`record_attributes`], [`task_attributes`] and the other side
/// items'): into the item, or into its size.
trait Attributes {
    fn put(&mut self, name: &'static str, value: AttributeValue);
    /// An attribute of `value`'s JSON text ([`json`]).
    fn put_json<T: Serialize + ?Sized>(&mut self, name: &'static str, value: &T);
}

impl Attributes for Item {
    fn put(&mut self, name: &'static str, value: AttributeValue) {
        self.insert(name.into(), value);
    }
    fn put_json<T: Serialize + ?Sized>(&mut self, name: &'static str, value: &T) {
        self.insert(name.into(), json(value));
    }
}

/// An item's size ([`item_size`]), summed as its attributes come: JSON text is counted, not
/// written.
struct Size(usize);

impl Attributes for Size {
    fn put(&mut self, name: &'static str, value: AttributeValue) {
        self.0 += name.len() + value_size(&value);
    }
    fn put_json<T: Serialize + ?Sized>(&mut self, name: &'static str, value: &T) {
        // As [`json`] writes it: `null` if it did not serialise.
        self.0 += name.len() + limits::json_len(value).unwrap_or("null".len());
    }
}

/// The attributes of a record's item, each put once: what [`record_item`] holds and
/// [`record_size`] measures.
fn record_attributes(r: &Record, layout: Layout, item: &mut impl Attributes) {
    let Layout { shards, .. } = layout;
    let pk = pk(&r.workflow, &r.key);
    item.put("due_kind", s(&due_kind(&DueList::of(r).prefix(), &pk, shards)));
    item.put("pk", AttributeValue::S(pk));
    item.put("sk", s(RECORD_SK));
    item.put("generation", n(r.generation));
    item.put("state", s(r.state.kind().as_str()));
    item.put("version", n(r.version));
    item.put_json("applied", &compact::applied(&r.applied));
    item.put_json("start_events", &r.start_events);
    item.put_json("history", &compact::history(&r.history, &history_context(r)));
    item.put("created_at", s(&ts(r.created_at)));
    item.put("updated_at", s(&ts(r.updated_at)));
    item.put("due_at", s(&ts(r.due_at())));
    if let Some(step) = r.state.step() {
        item.put("step", n(step));
    }
    match step_token(r) {
        Some(token) if layout.token_out_of_line(token) => item.put("token_sk", s(&token_sk(r, token))),
        Some(token) => item.put("token", s(token.expose())),
        None => {}
    }
    // The position's waits as one JSON attribute, the step's token kept apart (above): only a
    // step's wait is copied, to leave its token out (a group's branches, which may hold large
    // inputs, are written as they are).
    if !r.waits.is_empty() {
        let waits: Vec<Cow<'_, Wait>> = r
            .waits
            .iter()
            .map(|w| match w.role {
                Role::Step if w.token.is_some() => Cow::Owned(Wait { token: None, ..w.clone() }),
                _ => Cow::Borrowed(w),
            })
            .collect();
        item.put_json("waits", &waits);
    }
    for (name, steps) in [("missed", &r.missed), ("succeeded", &r.succeeded), ("confirmed", &r.confirmed)] {
        if !steps.is_empty() {
            item.put_json(name, steps);
        }
    }
    if !r.untils.is_empty() {
        item.put_json("untils", &r.untils);
    }
    // A compensation's plan and how each compensation's wait stands, tokens included.
    if let Some(compensation) = &r.compensation {
        item.put_json("compensation", compensation);
    }
    if let Some(write_id) = &r.write_id {
        item.put("write_id", s(write_id));
    }
    item.put("config_version", s(&r.config_version));
}

/// The token of the step a record is at (a group's branches keep theirs in `waits`): kept out
/// of line when long ([`token_item`]).
fn step_token(r: &Record) -> Option<&TaskToken> {
    r.step_wait().and_then(|w| w.token.as_ref())
}

/// What the record's audit trail is written against ([`compact`]).
fn history_context(r: &Record) -> compact::Context<'_> {
    compact::Context { base: r.created_at, applied: &r.applied, start_events: &r.start_events }
}

/// The record `item` holds. A token kept out of line is read from `token_item`, the item its
/// `token_sk` names ([`referred_token_sk`]).
/// Without it (it expired: [`TOKEN_KEPT`]), the record reads as having no token, as the token
/// itself is long dead: nothing is resumed with it, and an input to a record still waiting is
/// ignored into the ledger.
fn parse_record(item: &Item, token_item: Option<&Item>) -> Result<Record, StoreError> {
    let r = Reader { item };
    let (workflow, key) = r.names()?;
    let token = match (r.opt_s("token")?, referred_token_sk(item), token_item) {
        (Some(token), _, _) => Some(TaskToken::parse(token).map_err(|e| r.corrupt(format!("token: {e}")))?),
        (None, Some(_), Some(token_item)) => Some(parse_token(token_item)?),
        (None, _, _) => None,
    };
    let mut waits: Vec<Wait> = r.opt_s("waits")?.map(|_| r.json("waits")).transpose()?.unwrap_or_default();
    for w in waits.iter_mut().filter(|w| w.role == Role::Step) {
        w.token = token.clone();
    }
    let mut record = Record {
        workflow,
        key,
        generation: r.n("generation")?,
        state: parse_state(&r)?,
        version: r.n("version")?,
        waits,
        applied: compact::decode_applied(r.s("applied")?)
            .map_err(|e| r.corrupt(format!("attribute applied: {e}")))?,
        start_events: r.json("start_events")?,
        history: Vec::new(),
        created_at: r.time("created_at")?,
        updated_at: r.time("updated_at")?,
        write_id: r.opt_s("write_id")?.map(str::to_owned),
        config_version: r.s("config_version")?.to_owned(),
        missed: r.opt_s("missed")?.map(|_| r.json("missed")).transpose()?.unwrap_or_default(),
        confirmed: r.opt_s("confirmed")?.map(|_| r.json("confirmed")).transpose()?.unwrap_or_default(),
        succeeded: r.opt_s("succeeded")?.map(|_| r.json("succeeded")).transpose()?.unwrap_or_default(),
        compensation: r.opt_s("compensation")?.map(|_| r.json("compensation")).transpose()?,
        untils: r.opt_s("untils")?.map(|_| r.json("untils")).transpose()?.unwrap_or_default(),
    };
    record.history = compact::decode_history(r.s("history")?, &history_context(&record))
        .map_err(|e| r.corrupt(format!("attribute history: {e}")))?;
    Ok(record)
}

/// The head of the record `item` holds, without decoding the rest.
fn parse_head(item: &Item) -> Result<RecordHead, StoreError> {
    let r = Reader { item };
    let (workflow, key) = r.names()?;
    Ok(RecordHead {
        workflow,
        key,
        state: parse_state(&r)?,
        config_version: r.s("config_version")?.to_owned(),
    })
}

fn parse_state(r: &Reader) -> Result<State, StoreError> {
    let kind_text = r.s("state")?;
    let kind = Kind::parse(kind_text).ok_or_else(|| r.corrupt(format!("unknown state {kind_text:?}")))?;
    State::from_parts(kind, r.opt_n("step")?)
        .ok_or_else(|| r.corrupt(format!("state {kind_text} with a missing or superfluous step")))
}

// ---- side items ------------------------------------------------------------------------------

/// How a store lays a record's item out: its `by_due` shards, and which tokens it keeps in
/// token items.
#[derive(Clone, Copy, Debug)]
struct Layout {
    shards: u32,
    token_inline_max: usize,
}

impl Default for Layout {
    fn default() -> Layout {
        Layout { shards: DEFAULT_DUE_SHARDS, token_inline_max: TOKEN_INLINE_MAX }
    }
}

impl Layout {
    /// Whether a record keeps `token` in a token item.
    fn token_out_of_line(self, token: &TaskToken) -> bool {
        token.expose().len() > self.token_inline_max
    }
}

/// 128 bits of a token's SHA-256, in hex: what names its token item, with no token in the name.
pub fn token_ref(token: &TaskToken) -> String {
    use sha2::Digest;
    hex::encode(&sha2::Sha256::digest(token.expose().as_bytes())[..16])
}

/// What the sort key of every token item starts with: the record's own, so that one Query of
/// the sort keys that begin with `RECORD` reads the record and then its token items.
pub const TOKEN_SK_PREFIX: &str = "RECORD#T#";

/// The sort key of the token item that keeps `token` for `record`: [`TOKEN_SK_PREFIX`], the
/// record's generation and step inverted (eight hex digits each), `#` and the [`token_ref`]. So
/// the newest step's token item sorts right after the record, and [`WorkflowStore::load`] reads
/// both with one Query of two items. A cancelled record, which keeps its token but has no step,
/// names a token item of its own (step `u32::MAX`), put when it is written.
pub fn token_sk(record: &Record, token: &TaskToken) -> String {
    let step = record.state.step().unwrap_or(u32::MAX);
    format!("{TOKEN_SK_PREFIX}{:08x}{:08x}#{}", !record.generation, !step, token_ref(token))
}

/// The sort key of the token item the record `item` refers to: its `token_sk`.
fn referred_token_sk(item: &Item) -> Option<String> {
    item.get("token_sk").and_then(|v| v.as_s().ok()).cloned()
}

/// Whether `sk` names a token item.
fn is_token_sk(sk: &str) -> bool {
    sk.starts_with(TOKEN_SK_PREFIX)
}

/// The item that keeps `token` for `record`. A token that is canonical base64 (AWS's look it:
/// three bytes in four characters) is kept as those bytes, so that a 2,048-character token and
/// its keys fit two write units (1,536 bytes; a 1,024-character one fits one); any other token
/// as text.
pub fn token_item(record: &Record, token: &TaskToken) -> Item {
    let mut item = base_item(&record.workflow, &record.key, &token_sk(record, token));
    let text = token.expose();
    let value = match BASE64.decode(text) {
        Ok(bytes) if BASE64.encode(&bytes) == text => AttributeValue::B(Blob::new(bytes)),
        _ => s(text),
    };
    item.insert("token".into(), value);
    item.insert(TTL_ATTRIBUTE.into(), epoch(record.updated_at + TOKEN_KEPT));
    item
}

/// The token a token item ([`token_item`]) keeps.
pub fn parse_token(item: &Item) -> Result<TaskToken, StoreError> {
    let r = Reader { item };
    let text = match item.get("token") {
        Some(AttributeValue::B(bytes)) => BASE64.encode(bytes.as_ref()),
        Some(AttributeValue::S(text)) => text.clone(),
        _ => return Err(r.corrupt("a token item without its token".into())),
    };
    TaskToken::parse(text).map_err(|e| r.corrupt(format!("token: {e}")))
}

/// The attributes of a task's item, each put once: what [`task_item`] holds and [`task_size`]
/// measures (as [`record_attributes`] for a record).
fn task_attributes(t: &Task, item: &mut impl Attributes) {
    put_keys(item, (&t.workflow, &t.key), &task_sk(t.generation, t.step, t.attempt, t.kind));
    item.put("generation", n(t.generation));
    item.put("step", n(t.step));
    item.put("step_name", s(&t.step_name));
    item.put("task_id", s(&t.id));
    item.put("title", s(&t.title));
    item.put("queue", s(&t.queue));
    item.put("created_at", s(&ts(t.created_at)));
    item.put("published", AttributeValue::Bool(t.published));
    if t.attempt > 1 {
        item.put("attempt", n(t.attempt));
    }
    if let Some(previous) = &t.previous_error {
        item.put("previous_error", s(previous));
    }
    if t.kind == TaskKind::Compensation {
        item.put("task_kind", s(t.kind.as_str()));
    }
}

fn task_item(t: &Task) -> Item {
    item_of(|item| task_attributes(t, item))
}

fn parse_task(item: &Item) -> Result<Task, StoreError> {
    let r = Reader { item };
    let (workflow, key) = r.names()?;
    Ok(Task {
        workflow,
        key,
        generation: r.n("generation")?,
        step: r.n("step")?,
        step_name: r.s("step_name")?.to_owned(),
        id: r.s("task_id")?.to_owned(),
        title: r.s("title")?.to_owned(),
        queue: r.s("queue")?.to_owned(),
        created_at: r.time("created_at")?,
        published: r.bool("published")?,
        attempt: r.opt_n("attempt")?.unwrap_or(1),
        previous_error: r.opt_s("previous_error")?.map(str::to_owned),
        kind: match r.opt_s("task_kind")? {
            Some("compensation") => TaskKind::Compensation,
            _ => TaskKind::Step,
        },
        notice: 0,
    })
}

fn receipt_attributes(x: &Receipt, item: &mut impl Attributes) {
    put_keys(item, (&x.workflow, &x.key), &receipt_sk(x));
    item.put("input_id", s(x.id.as_str()));
    item.put("target", s(&x.target));
    item.put("hash", s(&x.hash));
    item.put_json("status", &x.status);
    item.put("created_at", s(&ts(x.created_at)));
    item.put(TTL_ATTRIBUTE, epoch(x.expires_at));
    if let Some(answer) = &x.answer {
        item.put_json("answer", answer);
    }
    if x.repeats > 0 {
        item.put("repeats", n(x.repeats));
    }
    if let Some(at) = x.last_repeat_at {
        item.put("last_repeat_at", s(&ts(at)));
    }
    if let Some(lease) = &x.lease {
        item.put("lease_by", s(&lease.by));
        item.put("lease_at", s(&ts(lease.at)));
    }
}

fn receipt_item(x: &Receipt) -> Item {
    item_of(|item| receipt_attributes(x, item))
}

fn parse_receipt(item: &Item) -> Result<Receipt, StoreError> {
    let r = Reader { item };
    let (workflow, key) = r.names()?;
    Ok(Receipt {
        workflow,
        key,
        target: r.s("target")?.to_owned(),
        id: r.id("input_id")?,
        hash: r.s("hash")?.to_owned(),
        status: r.json("status")?,
        answer: r.opt_s("answer")?.map(|_| r.json("answer")).transpose()?,
        created_at: r.time("created_at")?,
        expires_at: r.epoch(TTL_ATTRIBUTE)?,
        repeats: r.opt_n("repeats")?.unwrap_or(0),
        last_repeat_at: r.opt_time("last_repeat_at")?,
        lease: hold(&r, "lease_by", "lease_at")?,
    })
}

/// A [`Hold`] kept as two attributes, when both are there.
fn hold(r: &Reader<'_>, by: &str, at: &str) -> Result<Option<Hold>, StoreError> {
    Ok(match (r.opt_s(by)?, r.opt_time(at)?) {
        (Some(by), Some(at)) => Some(Hold { by: by.to_owned(), at }),
        _ => None,
    })
}

fn inbox_attributes(e: &InboxEntry, shards: u32, item: &mut impl Attributes) {
    put_keys(item, (&e.workflow, &e.key), &inbox_sk(e));
    item.put("step", n(e.step));
    item.put("step_name", s(&e.step_name));
    item.put("config_version", s(&e.config_version));
    item.put("generation", n(e.generation));
    item.put("input_id", s(e.id.as_str()));
    item.put("arrived_at", s(&ts(e.arrived_at)));
    item.put_json("input", &e.input);
    item.put("status", s(e.status.as_str()));
    // The buffer's own expiry, for the sweeper; DynamoDB deletes the item only after the
    // retention on top, so an entry is never gone before it was settled and ledgered.
    item.put("buffer_until", s(&ts(e.expires_at)));
    item.put(TTL_ATTRIBUTE, epoch(e.expires_at + baton_core::ports::store::INBOX_RETENTION));
    if let Some(hold) = &e.expiry_hold {
        item.put("expiry_by", s(&hold.by));
        item.put("expiry_at", s(&ts(hold.at)));
    }
    if let Some(target) = e.drain_target {
        item.put("drain_generation", n(target.generation));
        item.put("drain_step", n(target.step));
    }
    if let Some(at) = e.drained_at {
        item.put("drain_at", s(&ts(at)));
    }
    if e.callback_key {
        item.put("callback_key", AttributeValue::Bool(true));
    }
    if !e.status.is_final() {
        item.put("due_kind", s(&due_kind("inbox#buffered", &pk(&e.workflow, &e.key), shards)));
        item.put("due_at", s(&ts(e.due_at())));
    }
}

fn inbox_item(e: &InboxEntry, shards: u32) -> Item {
    item_of(|item| inbox_attributes(e, shards, item))
}

fn parse_inbox(item: &Item) -> Result<InboxEntry, StoreError> {
    let r = Reader { item };
    let status = match r.s("status")? {
        "buffered" => InboxStatus::Buffered,
        "draining" => InboxStatus::Draining,
        "expiring" => InboxStatus::Expiring,
        "applied" => InboxStatus::Applied,
        "expired" => InboxStatus::Expired,
        "ignored" => InboxStatus::Ignored,
        other => return Err(r.corrupt(format!("unknown inbox status {other:?}"))),
    };
    let (workflow, key) = r.names()?;
    Ok(InboxEntry {
        workflow,
        key,
        step: r.n("step")?,
        step_name: r.s("step_name")?.to_owned(),
        config_version: r.s("config_version")?.to_owned(),
        id: r.id("input_id")?,
        generation: r.n("generation")?,
        arrived_at: r.time("arrived_at")?,
        input: r.json("input")?,
        status,
        expires_at: r.time("buffer_until")?,
        expiry_hold: hold(&r, "expiry_by", "expiry_at")?,
        drained_at: r.opt_time("drain_at")?,
        drain_target: match (r.opt_n("drain_generation")?, r.opt_n("drain_step")?) {
            (Some(generation), Some(step)) => Some(DrainTarget { generation, step }),
            _ => None,
        },
        callback_key: matches!(item.get("callback_key"), Some(AttributeValue::Bool(true))),
    })
}

fn ledger_attributes(e: &LedgerEntry, item: &mut impl Attributes) {
    put_keys(item, (&e.workflow, &e.key), &ledger_sk(e.reason, &e.input_id));
    item.put("input_id", s(&e.input_id));
    item.put("reason", s(e.reason.as_str()));
    item.put_json("detail", &e.detail);
    item.put("at", s(&ts(e.at)));
    item.put(TTL_ATTRIBUTE, epoch(e.expires_at));
    if let Some(g) = e.generation {
        item.put("generation", n(g));
    }
    if let Some(state) = &e.state {
        item.put("state", s(state));
    }
    if let Some(v) = &e.config_version {
        item.put("config_version", s(v));
    }
}

fn ledger_item(e: &LedgerEntry) -> Item {
    item_of(|item| ledger_attributes(e, item))
}

fn parse_ledger(item: &Item) -> Result<LedgerEntry, StoreError> {
    let r = Reader { item };
    let reason_text = r.s("reason")?;
    let reason = IgnoreReason::ALL
        .into_iter()
        .find(|x| x.as_str() == reason_text)
        .ok_or_else(|| r.corrupt(format!("unknown ledger reason {reason_text:?}")))?;
    let (workflow, key) = r.names()?;
    Ok(LedgerEntry {
        workflow,
        key,
        input_id: r.s("input_id")?.to_owned(),
        reason,
        generation: r.opt_n("generation")?,
        state: r.opt_s("state")?.map(str::to_owned),
        detail: r.json("detail")?,
        config_version: r.opt_s("config_version")?.map(str::to_owned),
        at: r.time("at")?,
        expires_at: r.epoch(TTL_ATTRIBUTE)?,
    })
}

#[async_trait]
impl WorkflowStore for DynamoDbStore {
    async fn load(
        &self,
        workflow: &WorkflowName,
        key: &CorrelationKey,
    ) -> Result<Option<Arc<Record>>, StoreError> {
        // The record and the item right after it: its current token item, when the token is
        // kept out of line (`token_sk`). One read unit while the two are under 4 KB.
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("#pk = :pk AND begins_with(#sk, :prefix)")
            .expression_attribute_names("#pk", "pk")
            .expression_attribute_names("#sk", "sk")
            .expression_attribute_values(":pk", s(&pk(workflow, key)))
            .expression_attribute_values(":prefix", s(RECORD_SK))
            .consistent_read(true)
            .limit(2)
            .send()
            .await
            .map_err(sdk("Query"))?;
        let items = out.items();
        match items.first() {
            Some(item)
                if item.get("sk").and_then(|v| v.as_s().ok()).map(String::as_str) == Some(RECORD_SK) =>
            {
                self.record_from(item, items.get(1)).await.map(|r| Some(Arc::new(r)))
            }
            _ => Ok(None),
        }
    }

    async fn apply(&self, write: &Write) -> Result<Applied, StoreError> {
        self.put_token(&write.to).await?;
        let mut put = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(record_item(&write.to, self.layout())))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        put = match condition_for(write)? {
            // Rule: a record is created once per (workflow, key).
            Condition::Absent => put.condition_expression("attribute_not_exists(pk)"),
            // Rule: the transition table allows this move from the stored state, and nobody has
            // written since `decide` read the record (version).
            Condition::StateAndVersion { states, version } => {
                let placeholders: Vec<String> = (0..states.len()).map(|i| format!(":s{i}")).collect();
                let mut p = put
                    .condition_expression(format!(
                        "#state IN ({}) AND #version = :version",
                        placeholders.join(", ")
                    ))
                    .expression_attribute_names("#state", "state")
                    .expression_attribute_names("#version", "version")
                    .expression_attribute_values(":version", n(version));
                for (ph, kind) in placeholders.iter().zip(states) {
                    p = p.expression_attribute_values(ph, s(kind.as_str()));
                }
                p
            }
        };
        match conditional("PutItem", put.send().await)? {
            Ok(_) => Ok(Applied::Written),
            Err(old) => {
                let current = match old.filter(|i| !i.is_empty()) {
                    Some(item) => Some(Box::new(self.record_from(&item, None).await?)),
                    None => None,
                };
                Ok(Applied::Lost { current })
            }
        }
    }

    async fn put_task(&self, task: &Task) -> Result<Claim<Task>, StoreError> {
        match self.put_if_absent("PutItem", task_item(task)).await? {
            None => Ok(Claim::Acquired),
            Some(existing) => parse_task(&existing).map(Claim::Exists),
        }
    }

    async fn mark_task_published(&self, task: &Task) -> Result<(), StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(&pk(&task.workflow, &task.key)))
            .key("sk", s(&task_sk(task.generation, task.step, task.attempt, task.kind)))
            // Rule: only an existing task is marked; the update never creates a stray item.
            .condition_expression("attribute_exists(pk)")
            .update_expression("SET #published = :true")
            .expression_attribute_names("#published", "published")
            .expression_attribute_values(":true", AttributeValue::Bool(true))
            .send()
            .await;
        match conditional("UpdateItem", result)? {
            Ok(_) => Ok(()),
            Err(_) => Err(StoreError::Corrupt {
                pk: pk(&task.workflow, &task.key),
                sk: task_sk(task.generation, task.step, task.attempt, task.kind),
                problem: "the task to mark published does not exist".into(),
            }),
        }
    }

    async fn put_receipt(&self, receipt: &Receipt) -> Result<Claim<Receipt>, StoreError> {
        match self.put_if_absent("PutItem", receipt_item(receipt)).await? {
            None => Ok(Claim::Acquired),
            Some(existing) => parse_receipt(&existing).map(Claim::Exists),
        }
    }

    async fn complete_receipt(&self, receipt: &Receipt, answer: Value) -> Result<(), StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(&pk(&receipt.workflow, &receipt.key)))
            .key("sk", s(&receipt_sk(receipt)))
            // Rule: the first answer stands; completing twice keeps it.
            .condition_expression("#status = :pending")
            .update_expression("SET #status = :done, #answer = :answer")
            .expression_attribute_names("#status", "status")
            .expression_attribute_names("#answer", "answer")
            .expression_attribute_values(":pending", json(&ReceiptStatus::Pending))
            .expression_attribute_values(":done", json(&ReceiptStatus::Done))
            .expression_attribute_values(":answer", json(&answer))
            .send()
            .await;
        conditional("UpdateItem", result)?.ok();
        Ok(())
    }

    async fn take_over_receipt(&self, stored: &Receipt, hold: &Hold) -> Result<Claim<Receipt>, StoreError> {
        // Rule: a stale pending receipt is taken over by one attempt: the one whose write finds
        // it held as it read it.
        let held_as_read = match &stored.lease {
            Some(_) => "#lease_by = :seen",
            None => "attribute_not_exists(#lease_by)",
        };
        let mut request = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(&pk(&stored.workflow, &stored.key)))
            .key("sk", s(&receipt_sk(stored)))
            .condition_expression(format!("#status = :pending AND {held_as_read}"))
            .update_expression("SET #lease_by = :by, #lease_at = :at")
            .expression_attribute_names("#status", "status")
            .expression_attribute_names("#lease_by", "lease_by")
            .expression_attribute_names("#lease_at", "lease_at")
            .expression_attribute_values(":pending", json(&ReceiptStatus::Pending))
            .expression_attribute_values(":by", s(&hold.by))
            .expression_attribute_values(":at", s(&ts(hold.at)))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        if let Some(lease) = &stored.lease {
            request = request.expression_attribute_values(":seen", s(&lease.by));
        }
        match conditional("UpdateItem", request.send().await)? {
            Ok(_) => Ok(Claim::Acquired),
            Err(Some(old)) if !old.is_empty() => parse_receipt(&old).map(Claim::Exists),
            Err(_) => Err(StoreError::Corrupt {
                pk: pk(&stored.workflow, &stored.key),
                sk: receipt_sk(stored),
                problem: "the receipt to take over does not exist".into(),
            }),
        }
    }

    async fn release_receipt(&self, receipt: &Receipt) -> Result<(), StoreError> {
        // Rule: only the attempt that wrote the receipt deletes it, while it is still as that
        // attempt wrote it: pending, never taken over, created then.
        let result = self
            .client
            .delete_item()
            .table_name(&self.table)
            .key("pk", s(&pk(&receipt.workflow, &receipt.key)))
            .key("sk", s(&receipt_sk(receipt)))
            .condition_expression(
                "#status = :pending AND attribute_not_exists(#lease_by) AND #created = :created",
            )
            .expression_attribute_names("#status", "status")
            .expression_attribute_names("#lease_by", "lease_by")
            .expression_attribute_names("#created", "created_at")
            .expression_attribute_values(":pending", json(&ReceiptStatus::Pending))
            .expression_attribute_values(":created", s(&ts(receipt.created_at)))
            .send()
            .await;
        conditional("DeleteItem", result)?.map_or(Ok(()), |_| Ok(()))
    }

    async fn note_repeat(&self, receipt: &Receipt, at: OffsetDateTime) -> Result<(), StoreError> {
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(&pk(&receipt.workflow, &receipt.key)))
            .key("sk", s(&receipt_sk(receipt)))
            // Rule: only a receipt still there is counted; the update never creates a stray item.
            .condition_expression("attribute_exists(pk)")
            .update_expression("SET #repeats = if_not_exists(#repeats, :zero) + :one, #last = :at")
            .expression_attribute_names("#repeats", "repeats")
            .expression_attribute_names("#last", "last_repeat_at")
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":at", s(&ts(at)))
            .send()
            .await;
        conditional("UpdateItem", result)?.ok();
        Ok(())
    }

    async fn buffer(&self, entry: &InboxEntry) -> Result<Claim<InboxEntry>, StoreError> {
        match self.put_if_absent("PutItem", inbox_item(entry, self.due_shards)).await? {
            None => Ok(Claim::Acquired),
            Some(existing) => parse_inbox(&existing).map(Claim::Exists),
        }
    }

    async fn inbox(
        &self,
        workflow: &WorkflowName,
        key: &CorrelationKey,
        step_name: &str,
    ) -> Result<Vec<InboxEntry>, StoreError> {
        let prefix = format!("INBOX#{step_name}#");
        let items = self.query_partition(&pk(workflow, key), Some(&prefix)).await?;
        let mut entries = items.iter().map(parse_inbox).collect::<Result<Vec<_>, _>>()?;
        entries.sort_by(|a, b| (a.arrived_at, &a.id).cmp(&(b.arrived_at, &b.id)));
        Ok(entries)
    }

    async fn settle(
        &self,
        entry: &InboxEntry,
        from: InboxStatus,
        to: InboxStatus,
    ) -> Result<Claim<InboxEntry>, StoreError> {
        // Rule: an entry settles once, for good, by whoever holds it (a drain, the sweeper), and
        // leaves the due index; whoever loses sees how it was settled.
        let expressions = ("#status = :from", "SET #status = :to REMOVE #due_kind, #due_at");
        let names = [("#due_kind", "due_kind"), ("#due_at", "due_at")];
        self.move_entry(entry, expressions, to, &names, vec![(":from", s(from.as_str()))]).await
    }

    async fn claim(&self, entry: &InboxEntry, claim: &InboxClaim) -> Result<Claim<InboxEntry>, StoreError> {
        use InboxStatus::{Buffered, Draining, Expiring};
        let status = |x: InboxStatus| s(x.as_str());
        // Each condition is the rule InboxClaim::allows states; the entry stays in the due index,
        // so a claimer that dies is finished by a later sweep.
        let hold = [("#hold_by", "expiry_by"), ("#hold_at", "expiry_at")];
        let expire_names =
            [("#hold_by", "expiry_by"), ("#hold_at", "expiry_at"), ("#buffer_until", "buffer_until")];
        let target_names = [
            ("#drain_generation", "drain_generation"),
            ("#drain_step", "drain_step"),
            ("#drain_at", "drain_at"),
            ("#due_at", "due_at"),
        ];
        let (expressions, names, values): ((&str, &str), &[(&str, &str)], _) = match claim {
            // Rule: drains share an entry, and never take one a sweep is expiring.
            // The entry is due for the sweeper when the drain's lease runs out (its expiry, if
            // sooner), and at its expiry again once given back.
            InboxClaim::Drain(target, at) => (
                (
                    "#status IN (:buffered, :draining)",
                    "SET #status = :to, #drain_generation = :generation, #drain_step = :step, \
                     #drain_at = :at, #due_at = :due",
                ),
                &target_names,
                vec![
                    (":buffered", status(Buffered)),
                    (":draining", status(Draining)),
                    (":generation", n(target.generation)),
                    (":step", n(target.step)),
                    (":at", s(&ts(*at))),
                    (":due", s(&ts(claim.apply(entry).due_at()))),
                ],
            ),
            // Rule: only a drained entry is given back by a drain.
            InboxClaim::Undrain => (
                (
                    "#status = :draining",
                    "SET #status = :to, #due_at = :due REMOVE #drain_generation, #drain_step, #drain_at",
                ),
                &target_names,
                vec![(":draining", status(Draining)), (":due", s(&ts(entry.expires_at)))],
            ),
            // Rule: one sweep expires an entry; another takes it over only past the holder's lease.
            InboxClaim::Expire(h) => (
                (
                    "(#status = :buffered AND #buffer_until <= :at) OR (#status = :expiring AND (attribute_not_exists(#hold_by) OR #hold_by = :by OR #hold_at <= :stale))",
                    "SET #status = :to, #hold_by = :by, #hold_at = :at",
                ),
                &expire_names,
                vec![
                    (":buffered", status(Buffered)),
                    (":expiring", status(Expiring)),
                    (":by", s(&h.by)),
                    (":at", s(&ts(h.at))),
                    (":stale", s(&ts(h.at - baton_core::limits::EXPIRY_LEASE))),
                ],
            ),
            // Rule: only its holder gives an expiry back.
            InboxClaim::Release(h) => (
                ("#status = :expiring AND #hold_by = :by", "SET #status = :to REMOVE #hold_by, #hold_at"),
                &hold,
                vec![(":expiring", status(Expiring)), (":by", s(&h.by))],
            ),
        };
        self.move_entry(entry, expressions, claim.to(), names, values).await
    }

    async fn put_ledger(&self, entry: &LedgerEntry) -> Result<(), StoreError> {
        self.put_if_absent("PutItem", ledger_item(entry)).await.map(|_| ())
    }

    async fn register_config(&self, config: &RegisteredConfig, started: bool) -> Result<(), StoreError> {
        // One write either way, as the put-if-absent it replaces: the first registration's
        // canonical form and time stand; a function's start moves the start time, and adds the
        // shard count it writes `by_due` with to the set of those the functions ever used, which
        // the operator commands read (`registered_due_shards`). An operator's registration
        // (`started` false) adds no count: only what the functions write may widen the reads.
        let mut update = self
            .client
            .update_item()
            .table_name(&self.table)
            .key("pk", s(CONFIG_PK))
            .key("sk", s(&format!("VERSION#{}", config.version)))
            .expression_attribute_names("#version", "version")
            .expression_attribute_names("#canonical", "canonical")
            .expression_attribute_names("#registered", "registered_at")
            .expression_attribute_names("#started", "started_at")
            .expression_attribute_values(":version", s(&config.version))
            .expression_attribute_values(":canonical", s(&config.canonical))
            .expression_attribute_values(":at", s(&ts(config.started_at)));
        let set = "SET #version = :version, #canonical = if_not_exists(#canonical, :canonical), \
                   #registered = if_not_exists(#registered, :at)";
        update = if started {
            update
                .update_expression(format!("{set}, #started = :at ADD #shards :shards"))
                .expression_attribute_names("#shards", "due_shards")
                .expression_attribute_values(":shards", AttributeValue::Ns(vec![self.due_shards.to_string()]))
        } else {
            update.update_expression(format!("{set}, #started = if_not_exists(#started, :at)"))
        };
        update.send().await.map_err(sdk("UpdateItem"))?;
        Ok(())
    }

    async fn configs(&self) -> Result<Vec<RegisteredConfig>, StoreError> {
        let mut all = Vec::new();
        for item in self.query_partition(CONFIG_PK, Some("VERSION#")).await? {
            let r = Reader { item: &item };
            all.push(RegisteredConfig {
                version: r.s("version")?.to_owned(),
                canonical: r.s("canonical")?.to_owned(),
                registered_at: r.time("registered_at")?,
                started_at: r.time("started_at")?,
            });
        }
        all.sort_by(|a, b| (a.registered_at, &a.version).cmp(&(b.registered_at, &b.version)));
        Ok(all)
    }

    async fn ledgered(
        &self,
        workflow: &WorkflowName,
        key: &CorrelationKey,
        input_id: &str,
        reason: IgnoreReason,
    ) -> Result<bool, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", s(&pk(workflow, key)))
            .key("sk", s(&ledger_sk(reason, input_id)))
            .projection_expression("pk")
            .consistent_read(true)
            .send()
            .await
            .map_err(sdk("GetItem"))?;
        Ok(out.item.is_some())
    }

    async fn trace(&self, workflow: &WorkflowName, key: &CorrelationKey) -> Result<Trace, StoreError> {
        let mut trace = Trace::default();
        let (mut record, mut tokens) = (None, HashMap::new());
        for item in self.query_partition(&pk(workflow, key), None).await? {
            let sk = Reader { item: &item }.s("sk")?;
            if sk == RECORD_SK {
                record = Some(item);
                continue;
            }
            if is_token_sk(sk) {
                // Read for the record's token only: a token is never shown.
                tokens.insert(sk.to_owned(), item);
                continue;
            }
            match sk.split('#').next() {
                Some("TASK") => trace.tasks.push(parse_task(&item)?),
                Some("RECEIPT") => trace.receipts.push(parse_receipt(&item)?),
                Some("INBOX") => trace.inbox.push(parse_inbox(&item)?),
                Some("LEDGER") => trace.ledger.push(parse_ledger(&item)?),
                _ => {
                    return Err(
                        Reader { item: &item }.corrupt(format!("unknown item kind in sort key {sk:?}"))
                    );
                }
            }
        }
        if let Some(item) = &record {
            trace.record = Some(parse_record(item, referred_token_sk(item).and_then(|sk| tokens.get(&sk)))?);
        }
        sort_trace(&mut trace);
        Ok(trace)
    }

    async fn due(
        &self,
        list: DueList,
        before: OffsetDateTime,
        limit: usize,
    ) -> Result<Vec<Arc<Record>>, StoreError> {
        let items = self.query_due_all(&[list.prefix()], before, limit, Order::OldestFirst).await?;
        Ok(self.records_from(&items).await?.into_iter().map(Arc::new).collect())
    }

    async fn due_heads(
        &self,
        kind: Kind,
        before: OffsetDateTime,
        limit: usize,
    ) -> Result<Vec<RecordHead>, StoreError> {
        let prefixes: Vec<String> = DueList::of_state(kind).into_iter().map(DueList::prefix).collect();
        let items = self.query_due_all(&prefixes, before, limit, Order::OldestFirst).await?;
        items.iter().map(parse_head).collect()
    }

    async fn expired_buffers(
        &self,
        before: OffsetDateTime,
        limit: usize,
    ) -> Result<Vec<InboxEntry>, StoreError> {
        self.query_due_all(&["inbox#buffered".to_owned()], before, limit, Order::OldestFirst)
            .await?
            .iter()
            .map(parse_inbox)
            .collect()
    }

    async fn count_by_state(&self, up_to: u64) -> Result<BTreeMap<Kind, Count>, StoreError> {
        let prefixes = Kind::ALL
            .map(|kind| DueList::of_state(kind).into_iter().map(DueList::prefix).collect::<Vec<_>>());
        let counts =
            futures::future::try_join_all(prefixes.iter().map(|p| self.count_due_all(p, up_to))).await?;
        Ok(Kind::ALL.into_iter().zip(counts).filter(|(_, n)| *n != Count::Exact(0)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use baton_core::domain::ids::EventId;
    use baton_core::domain::lifecycle::Resume;

    /// The largest record item, by DynamoDB's size rules, over every write of a workflow of
    /// `steps` steps run to success: each step waits about an hour for one callback with a small
    /// payload; ids and the task token are UUID-sized (the emulator's tokens; AWS's are longer,
    /// docs/COST.md).
    /// Returns it, and the record at the end.
    fn largest_record(steps: usize) -> (usize, Record) {
        largest_record_with(steps, |step| format!("6f1c2a7e-90b4-4d1e-8a3c-{:012}", 100 + step))
    }

    /// [`largest_record`] with each step's task token made by `token`.
    fn largest_record_with(steps: usize, token: impl Fn(u32) -> String) -> (usize, Record) {
        use baton_core::domain::lifecycle::{Finish, Input, Plan, Source, StepOutcome, StepPlan, decide};
        let uuid = |n: usize| format!("6f1c2a7e-90b4-4d1e-8a3c-{n:012}");
        let plan = Plan {
            steps: (0..steps).map(|_| StepPlan::requiring(&["decision"])).collect(),
            on_restart: baton_core::domain::lifecycle::OnRestart::AfterTerminal,
            version: "vfd00d5526fd9".into(),
        };
        let (workflow, key) =
            (WorkflowName::parse("order-review").unwrap(), CorrelationKey::parse("order-1234567").unwrap());
        let mut now = time::macros::datetime!(2026-12-01 09:00:00.123456 UTC);
        let mut record: Option<Record> = None;
        let mut largest = 0;
        let mut apply = |input: Input, now: OffsetDateTime, record: &mut Option<Record>| {
            let to =
                decide(&plan, (&workflow, &key), record.as_ref(), &input, now).write.expect("a write").to;
            largest = largest.max(record_size(&to));
            *record = Some(to);
        };
        apply(Input::start(EventId::parse(uuid(0)).unwrap()), now, &mut record);
        for step in 0..steps as u32 {
            now += time::Duration::milliseconds(47);
            let token = TaskToken::parse(token(step)).unwrap();
            let deadline = now + time::Duration::days(2);
            apply(Input::StepReady { generation: 1, step, token, deadline }, now, &mut record);
            now += time::Duration::minutes(61);
            let data = serde_json::json!({"decision": "approve"}).as_object().unwrap().clone();
            let id = EventId::parse(uuid(200 + step as usize)).unwrap();
            let hash = baton_core::domain::ids::payload_hash(id.as_str().as_bytes());
            let outcome = StepOutcome::Succeeded;
            let generation = None;
            apply(
                Input::StepInput {
                    id,
                    hash,
                    source: Source::Callback,
                    step,
                    outcome,
                    data,
                    generation,
                    attempt: None,
                },
                now,
                &mut record,
            );
        }
        now += time::Duration::milliseconds(52);
        apply(Input::Finished { generation: 1, finish: Finish::Succeeded }, now, &mut record);
        let record = record.expect("a record");
        assert_eq!(record.state, State::Succeeded);
        (largest, record)
    }

    /// Fills every part of `record` the JSON attributes hold: a group's branches (each with
    /// inputs, an owed resume, failed attempts), a compensation with its waits, and the branch
    /// lists; text from `pick`.
    fn with_branches_attempts_and_compensation(
        record: &mut Record,
        pick: &dyn Fn(usize) -> String,
        values: &[Value],
    ) {
        use baton_core::domain::lifecycle::{
            Compensation, FailedAttempt, Role, Source, Trigger, Undo, Wait, WaitOutcome, WaitStatus,
        };
        let at = record.created_at;
        let attempt = |i: usize| FailedAttempt {
            attempt: i as u32 + 1,
            error: pick(i),
            cause: pick(i + 1).repeat(20),
            input: EventId::parse(format!("a{}", i)).unwrap(),
            source: Source::Callback,
            at,
        };
        record.waits.extend((0..5).map(|i| Wait {
            step: i + 1,
            role: Role::Branch,
            token: Some(TaskToken::parse(format!("tok{i}{}", "x".repeat(200))).unwrap()),
            deadline: Some(at),
            inputs: Arc::new(
                values.iter().enumerate().map(|(j, v)| (pick(i as usize + j), v.clone())).collect(),
            ),
            failed: (0..3).map(attempt).collect(),
            notified: 3,
            notice_at: None,
            status: WaitStatus::Owed {
                outcome: WaitOutcome::Failed,
                resume: Resume::Failure { error: pick(i as usize), cause: pick(i as usize + 1) },
                since: at,
            },
        }));
        record.missed = vec![1, 2];
        record.confirmed = vec![3];
        record.succeeded = vec![4, 5];
        let event = serde_json::json!({"at": "2026-12-01T09:30:00.25Z", "bad": 7});
        record.untils = vec![
            baton_core::domain::lifecycle::Until::read(6, "/at", &event),
            baton_core::domain::lifecycle::Until::read(7, "/bad", &event),
        ];
        let undo = |i: u32| Undo {
            wait: Wait {
                step: i,
                role: Role::Compensation,
                token: Some(TaskToken::parse(format!("u{i}{}", "y".repeat(300))).unwrap()),
                deadline: Some(at),
                inputs: Arc::default(),
                failed: (0..2).map(attempt).collect(),
                notified: 3,
                notice_at: None,
                status: WaitStatus::Owed {
                    outcome: WaitOutcome::Failed,
                    resume: Resume::Success { output: Value::Array(values.to_vec()) },
                    since: at,
                },
            },
            skip: None,
            acks: record.applied.clone(),
        };
        record.compensation = Some(Compensation {
            trigger: Trigger::Failed { error: pick(0), cause: pick(1) },
            began_at: at,
            at: Some(2),
            undos: (0..3).map(undo).collect(),
        });
    }

    /// The widest group a config may declare (`Group::MAX_BRANCHES`), each branch on a
    /// 2,048-character token, every attempt of every branch failed with the longest texts Step
    /// Functions takes (in four-byte characters) under 768-byte input ids, and the group's inputs
    /// at their cap, held twice: the engine's write still fits DynamoDB's item (found by review:
    /// such a record reached 467 KB, refused on every write).
    #[test]
    fn the_widest_retried_group_with_the_longest_failures_is_written_within_the_item_limit() {
        use baton_core::domain::lifecycle::{
            FailedAttempt, MAX_STEP_INPUT_BYTES, Role, Source, Wait, WaitOutcome, WaitStatus,
        };
        let mut record = largest_record(1).1;
        let at = record.created_at;
        let branches = baton_core::domain::config::Group::MAX_BRANCHES;
        let share = MAX_STEP_INPUT_BYTES / branches - 64;
        let long_id = |i: usize, a: usize| {
            EventId::parse(format!("{i:03}-{a:02}-{}", "\u{1F600}".repeat(188))).unwrap()
        };
        record.waits = (0..branches)
            .map(|i| {
                let inputs: serde_json::Map<String, Value> =
                    [("blob".to_owned(), Value::String("i".repeat(share)))].into_iter().collect();
                Wait {
                    step: i as u32,
                    role: Role::Branch,
                    token: Some(TaskToken::parse("T".repeat(TaskToken::MAX_LEN)).unwrap()),
                    deadline: Some(at),
                    notified: 3,
                    notice_at: None,
                    status: WaitStatus::Owed {
                        outcome: WaitOutcome::Succeeded,
                        resume: Resume::Success { output: Value::Object(inputs.clone()) },
                        since: at,
                    },
                    inputs: Arc::new(inputs),
                    failed: (0..10)
                        .map(|a| FailedAttempt {
                            attempt: a as u32 + 1,
                            error: "\u{1F600}".repeat(128),
                            cause: "\u{1F600}".repeat(512),
                            input: long_id(i, a),
                            source: Source::Callback,
                            at,
                        })
                        .collect(),
                }
            })
            .collect();
        assert!(record_size(&record) > MAX_ITEM_BYTES, "the case is over the limit");
        baton_core::use_cases::engine::fit_item_limit(&mut record, ITEM_SIZES);
        let size = record_size(&record);
        assert!(size <= MAX_ITEM_BYTES, "{size} bytes");
        // Every attempt is still there, with who failed it.
        assert!(
            record
                .waits
                .iter()
                .all(|b| b.failed.len() == 10 && b.failed.iter().all(|a| !a.input.as_str().is_empty()))
        );
    }

    proptest::proptest! {
        #[test]
        fn the_bound_a_write_checks_first_is_never_below_the_size(
            strings in proptest::collection::vec("\\PC{0,30}|[\\x00-\\x1f\"\\\\]{0,30}", 1..40),
            numbers in proptest::collection::vec(proptest::num::f64::ANY, 0..8),
            jumps in proptest::collection::vec(-4_000_000_000_000i64..4_000_000_000_000, 1..20),
        ) {
            use baton_core::domain::lifecycle::{AppliedInput, AuditEntry, Cause};
            let mut record = largest_record(2).1;
            let pick = |i: usize| strings[i % strings.len()].clone();
            for (i, jump) in jumps.iter().enumerate() {
                record.history.push(AuditEntry {
                    at: record.created_at + time::Duration::microseconds(*jump),
                    generation: u32::MAX - i as u32,
                    from: Some(pick(i).into()),
                    to: pick(i + 1).into(),
                    cause: Cause::Cancel,
                    cause_id: Some(pick(i + 2).into()),
                    version: u64::MAX - i as u64,
                });
                if let Ok(id) = EventId::parse(format!("x{}", pick(i))) {
                    record.applied.push(AppliedInput { id, hash: pick(i + 3), step: u32::MAX, generation: u32::MAX, source: baton_core::domain::lifecycle::Source::Event });
                }
            }
            let values: Vec<Value> = numbers.iter().map(|n| serde_json::json!(n)).chain(strings.iter().map(|s| serde_json::json!({ s: [s, null, true] }))).collect();
            let step = &mut record.waits[0];
            step.inputs = Arc::new(values.iter().enumerate().map(|(i, v)| (pick(i), v.clone())).collect());
            let owe = |w: &mut baton_core::domain::lifecycle::Wait, resume: Resume| {
                w.status = baton_core::domain::lifecycle::WaitStatus::Owed {
                    outcome: baton_core::domain::lifecycle::WaitOutcome::Succeeded,
                    resume,
                    since: w.deadline.unwrap_or(time::OffsetDateTime::UNIX_EPOCH),
                };
            };
            owe(step, Resume::Success { output: Value::Array(values.clone()) });
            with_branches_attempts_and_compensation(&mut record, &pick, &values);
            proptest::prop_assert!(record_size_bound(&record) >= record_size(&record));
            owe(&mut record.waits[0], Resume::Failure { error: pick(0), cause: pick(1) });
            proptest::prop_assert!(record_size_bound(&record) >= record_size(&record));
            // The size counted without the item is the item's, exactly.
            let layout = Layout { shards: MAX_DUE_SHARDS, ..Layout::default() };
            proptest::prop_assert_eq!(record_size(&record), item_size(&record_item(&record, layout)));
        }
    }

    /// The size of a task's, a receipt's, an inbox entry's and a ledger entry's item, counted
    /// without building it, is the item's, exactly: each with every optional attribute, and JSON
    /// that escapes.
    #[test]
    fn every_side_items_size_is_its_items() {
        use baton_core::ports::store::{DrainTarget, Hold, InboxStatus, ReceiptStatus, TaskKind};
        let (workflow, key): (WorkflowName, CorrelationKey) =
            ("order-review".parse().unwrap(), "ord-7".parse().unwrap());
        let at = time::macros::datetime!(2026-12-07 10:00:00.123456 UTC);
        let hold = Some(Hold { by: "sweep-1".into(), at });
        let json = serde_json::json!({ "note": "a \"quoted\"\nline\u{1}", "amount": 12.5, "n": [1, -2, null, true] });
        let task = Task {
            workflow: workflow.clone(),
            key: key.clone(),
            generation: 2,
            step: 1,
            step_name: "approve".into(),
            id: "task-1".into(),
            attempt: 3,
            previous_error: Some("Timeout \"late\"".into()),
            title: "Approve ord-7".into(),
            queue: "approvals".into(),
            created_at: at,
            published: true,
            kind: TaskKind::Compensation,
            notice: 0,
        };
        assert_eq!(task_size(&task), item_size(&task_item(&task)));
        let receipt = Receipt {
            workflow: workflow.clone(),
            key: key.clone(),
            target: "approve".into(),
            id: EventId::parse("cb-1").unwrap(),
            hash: "ab".repeat(32),
            status: ReceiptStatus::Done,
            answer: Some(json.clone()),
            created_at: at,
            expires_at: at,
            repeats: 2,
            last_repeat_at: Some(at),
            lease: hold.clone(),
        };
        assert_eq!(receipt_size(&receipt), item_size(&receipt_item(&receipt)));
        let entry = InboxEntry {
            workflow: workflow.clone(),
            key: key.clone(),
            step: 1,
            step_name: "approve".into(),
            config_version: "v123".into(),
            id: EventId::parse("evt-1").unwrap(),
            generation: 2,
            arrived_at: at,
            input: json.clone(),
            status: InboxStatus::Buffered,
            expires_at: at,
            expiry_hold: hold,
            drain_target: Some(DrainTarget { generation: 2, step: 1 }),
            drained_at: Some(at),
            callback_key: true,
        };
        assert_eq!(inbox_size(&entry), item_size(&inbox_item(&entry, MAX_DUE_SHARDS)));
        let ledger = LedgerEntry {
            workflow,
            key,
            input_id: "evt-1".into(),
            reason: IgnoreReason::OutOfOrder,
            generation: Some(2),
            state: Some("waiting{1}".into()),
            detail: json,
            config_version: Some("v123".into()),
            at,
            expires_at: at,
        };
        assert_eq!(ledger_size(&ledger), item_size(&ledger_item(&ledger)));
    }

    #[test]
    fn a_record_reads_back_as_written_with_its_names_in_pk_alone() {
        let record = largest_record(2).1;
        let item = record_item(&record, Layout::default());
        assert_eq!(parse_record(&item, None).unwrap(), record);
        assert!(!item.contains_key("workflow") && !item.contains_key("key"));
    }

    #[test]
    fn a_record_write_stays_within_one_write_unit_for_up_to_five_steps() {
        for steps in 1..=5 {
            let bytes = largest_record(steps).0;
            assert!(
                bytes <= 1024,
                "{steps} steps: the record reaches {bytes} bytes, more than one write unit"
            );
        }
    }

    /// With tokens as long as AWS's (the API's 2,048 characters), the token is kept in its own
    /// item: the record's writes stay within one write unit, and the token item's one write a
    /// step within two when the token is base64 (as AWS's are: 1,536 bytes); a token of any
    /// other characters is kept as text and reads back the same.
    #[test]
    fn with_aws_length_tokens_a_record_write_stays_within_one_write_unit_and_a_token_write_two() {
        let aws_token =
            |step: u32| BASE64.encode((0..1536u32).map(|i| (i * 7 + step) as u8).collect::<Vec<u8>>());
        for steps in 1..=5 {
            let (bytes, record) = largest_record_with(steps, aws_token);
            assert!(bytes <= 1024, "{steps} steps: the record reaches {bytes} bytes");
            let token = TaskToken::parse(aws_token(0)).unwrap();
            assert_eq!(token.expose().len(), TaskToken::MAX_LEN);
            let item = token_item(&record, &token);
            let size = item_size(&item);
            assert!((1025..=2048).contains(&size), "the token item: {size} bytes, two write units");
            assert_eq!(parse_token(&item).unwrap(), token);
        }
        let (_, record) = largest_record(1);
        let text = TaskToken::parse(format!("{}~", "a".repeat(TaskToken::MAX_LEN - 1))).unwrap();
        let item = token_item(&record, &text);
        assert!(matches!(item.get("token"), Some(AttributeValue::S(_))), "not base64: kept as text");
        assert_eq!(parse_token(&item).unwrap(), text);
        // A UUID-sized token (the emulator's) stays in the record, as before token items.
        let short = record_item(&largest_record_with(1, |_| "6f1c2a7e-90b4".into()).1, Layout::default());
        assert!(!short.contains_key("token_sk"));
    }

    /// The record at a parallel group of `branches` branches, each parked on an AWS-length
    /// token (2,048 characters of base64), kept inline in the record's `branches`.
    fn at_a_wide_group(branches: u32) -> Record {
        use baton_core::domain::lifecycle::{Input, Plan, StepPlan, decide};
        let plan = Plan {
            steps: std::iter::once(StepPlan::default())
                .chain((0..branches).map(|_| StepPlan::requiring(&["ok"])))
                .collect(),
            on_restart: baton_core::domain::lifecycle::OnRestart::AfterTerminal,
            version: "vfd00d5526fd9".into(),
        }
        .grouped(1, branches);
        let (workflow, key) =
            (WorkflowName::parse("order-review").unwrap(), CorrelationKey::parse("order-1234567").unwrap());
        let now = time::macros::datetime!(2026-12-01 09:00:00.123456 UTC);
        let token = |step: u32| {
            TaskToken::parse(BASE64.encode((0..1536u32).map(|i| (i * 7 + step) as u8).collect::<Vec<u8>>()))
                .unwrap()
        };
        let mut record = None;
        let apply = |input: Input, record: &mut Option<Record>| {
            *record = Some(
                decide(&plan, (&workflow, &key), record.as_ref(), &input, now).write.expect("a write").to,
            );
        };
        apply(Input::start(EventId::parse("e-1").unwrap()), &mut record);
        let deadline = now + time::Duration::days(2);
        apply(Input::StepReady { generation: 1, step: 0, token: token(0), deadline }, &mut record);
        let data = serde_json::Map::new();
        apply(
            Input::StepInput {
                id: EventId::parse("cb-0").unwrap(),
                hash: "h".repeat(64),
                source: baton_core::domain::lifecycle::Source::Callback,
                step: 0,
                outcome: baton_core::domain::lifecycle::StepOutcome::Succeeded,
                data,
                generation: None,
                attempt: None,
            },
            &mut record,
        );
        for step in 1..=branches {
            apply(Input::StepReady { generation: 1, step, token: token(step), deadline }, &mut record);
        }
        record.expect("a record")
    }

    /// What bounds a record at a parallel group with AWS-length tokens: each branch keeps its
    /// token inline (2,048 characters, about 2.1 KB of the record's `waits`), and nothing in
    /// the config bounds a group's width. With the group's inputs at their limit
    /// (`MAX_STEP_INPUT_BYTES`, held twice while a resume is owed), 69 branches fit DynamoDB's
    /// 400 KB item and 70 do not; with no inputs, 193 fit and 194 do not (docs/LIMITS.md).
    #[test]
    fn a_record_at_a_parallel_group_holds_69_aws_length_branch_tokens_beside_inputs_at_their_limit() {
        use baton_core::domain::lifecycle::MAX_STEP_INPUT_BYTES;
        use baton_core::ports::store::limits::MAX_ITEM_BYTES;
        let with_inputs = |mut r: Record| {
            let blob = "x".repeat(MAX_STEP_INPUT_BYTES - "{\"blob\":\"\"}".len());
            let inputs: serde_json::Map<String, Value> =
                [("blob".to_owned(), Value::String(blob))].into_iter().collect();
            assert_eq!(serde_json::to_string(&inputs).unwrap().len(), MAX_STEP_INPUT_BYTES, "at the limit");
            let b = &mut r.waits[0];
            b.status = baton_core::domain::lifecycle::WaitStatus::Owed {
                outcome: baton_core::domain::lifecycle::WaitOutcome::Succeeded,
                resume: Resume::Success { output: Value::Object(inputs.clone()) },
                since: b.deadline.unwrap_or(time::OffsetDateTime::UNIX_EPOCH),
            };
            b.inputs = Arc::new(inputs);
            r
        };
        let fits = |r: &Record| record_size(r) <= MAX_ITEM_BYTES;
        for (branches, full, fit) in
            [(69, true, true), (70, true, false), (193, false, true), (194, false, false)]
        {
            let record = at_a_wide_group(branches);
            assert_eq!(
                record
                    .branches()
                    .filter(|b| b.token.as_ref().is_some_and(|t| t.expose().len() == TaskToken::MAX_LEN))
                    .count(),
                branches as usize
            );
            let record = if full { with_inputs(record) } else { record };
            assert_eq!(
                fits(&record),
                fit,
                "{branches} branches, inputs at their limit: {full}: {} bytes",
                record_size(&record)
            );
        }
    }

    /// Reads stay proportional to what is due, never to the table: no code that ships calls
    /// Scan (tests may, to look at a table).
    #[test]
    fn nothing_that_ships_scans_the_table() {
        fn sources(dir: &std::path::Path, found: &mut Vec<std::path::PathBuf>) {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    sources(&path, found);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    found.push(path);
                }
            }
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut files = Vec::new();
        for crate_dir in [
            "shared/core",
            "shared/aws",
            "shared/lambda",
            "shared/secrets-manager",
            "cli",
            "local",
            "harness",
        ]
        .into_iter()
        .map(|c| root.join(c))
        {
            sources(&crate_dir.join("src"), &mut files);
        }
        for function in std::fs::read_dir(root.join("functions")).into_iter().flatten().flatten() {
            sources(&function.path().join("src"), &mut files);
        }
        assert!(files.len() > 30, "the sources were found: {}", files.len());
        let scanning: Vec<_> = files
            .iter()
            .filter(|f| std::fs::read_to_string(f).unwrap_or_default().contains(&[".sc", "an()"].concat()))
            .collect();
        assert!(scanning.is_empty(), "these call Scan: {scanning:?}");
    }

    #[test]
    fn the_due_shard_of_a_key_never_changes_and_every_partition_is_read() {
        // Stored in items: these values are a format, pinned (FNV-1a, 32 bits).
        assert_eq!(due_shard("WF#order-review#k1", u32::MAX), 2_088_077_107);
        assert_eq!(due_shard("WF#order-review#k1", 8), 3);
        assert_eq!(due_shard("", 8), 2_166_136_261 % 8);
        assert_eq!(due_shard("anything", 1), 0);
        let spread: std::collections::BTreeSet<u32> =
            (0..200).map(|i| due_shard(&format!("WF#order-review#order-{i}"), 8)).collect();
        assert_eq!(spread.len(), 8, "200 keys reach every one of 8 shards");
        assert_eq!(due_partitions("record#waiting", 2), ["record#waiting#0", "record#waiting#1"]);
    }

    #[test]
    fn timestamps_sort_as_strings_in_time_order() {
        let a = OffsetDateTime::UNIX_EPOCH + time::Duration::seconds(9);
        let b = a + time::Duration::microseconds(1);
        let c = a + time::Duration::days(400);
        assert!(ts(a) < ts(b) && ts(b) < ts(c));
        assert_eq!(ts(a), "1970-01-01T00:00:09.000000Z");
        assert_eq!(OffsetDateTime::parse(&ts(b), &Rfc3339).unwrap(), b);
    }

    proptest::proptest! {
        /// Written digit by digit, a timestamp reads as `format!` writes it, at any offset and
        /// in any year the time crate holds (before year 0 too).
        #[test]
        fn timestamps_read_as_format_writes_them(
            micros in -377_705_000_000_000_000i64..253_402_200_000_000_000i64,
            offset in -86_399i32..86_400,
        ) {
            let utc = OffsetDateTime::UNIX_EPOCH + time::Duration::microseconds(micros);
            let t = utc.to_offset(time::UtcOffset::from_whole_seconds(offset).unwrap());
            let expected = format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
                utc.year(), u8::from(utc.month()), utc.day(), utc.hour(), utc.minute(), utc.second(),
                utc.microsecond()
            );
            proptest::prop_assert_eq!(ts(t), expected);
        }
    }

    #[test]
    fn item_sizes_follow_dynamodbs_published_rules() {
        // Names count, strings count their UTF-8 bytes ("é" is two).
        let item = Item::from([("pk".into(), s("abc")), ("é".into(), s("é"))]);
        assert_eq!(item_size(&item), (2 + 3) + (2 + 2));
        // Numbers: 1 byte per two significant digits, plus 1; zeroes at either end do not count.
        assert_eq!(number_size("12345"), 4);
        assert_eq!(number_size("1000"), 2);
        assert_eq!(number_size("0.0012"), 2);
        assert_eq!(number_size("0"), 2);
        // Booleans and null are one byte; lists and maps add 3 bytes and 1 per element.
        let nested = Item::from([
            ("b".into(), AttributeValue::Bool(true)),
            ("l".into(), AttributeValue::L(vec![s("xy"), AttributeValue::Null(true)])),
        ]);
        assert_eq!(item_size(&nested), (1 + 1) + (1 + 3 + (1 + 2) + (1 + 1)));
    }

    #[test]
    fn sort_keys_order_tasks_by_generation_then_step() {
        assert!(task_sk(1, 10, 1, TaskKind::Step) < task_sk(2, 0, 1, TaskKind::Step));
        assert!(task_sk(2, 2, 1, TaskKind::Step) < task_sk(2, 10, 1, TaskKind::Step));
        assert!(
            task_sk(2, 2, 1, TaskKind::Step) < task_sk(2, 2, 2, TaskKind::Step)
                && task_sk(2, 2, 10, TaskKind::Step) < task_sk(2, 3, 1, TaskKind::Step)
        );
    }
}
