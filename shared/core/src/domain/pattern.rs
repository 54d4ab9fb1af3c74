//! Eligibility: EventBridge event patterns, compiled once and matched against normalised events.
//!
//! A workflow's `start.when` and a step's `accepts_events` are EventBridge event patterns over the
//! normalised event (`source`, `type`, `data`, ...; see [`crate::domain::event`]). baton evaluates them
//! itself instead of asking EventBridge, so the same config behaves the same locally, in tests and
//! in production, and an operator who knows EventBridge already knows the language.
//!
//! [`Pattern::parse`] checks the whole pattern and compiles it into a small tree (parse, then
//! apply). Every mistake is reported at start-up with its path inside the pattern
//! (`data.total[0].numeric`), so a typo cannot silently turn into a rule that never matches.
//! [`Pattern::matches`] then cannot fail: it only walks the tree.
//!
//! The rules it keeps, from the AWS documentation ("Creating event patterns", "Comparison
//! operators for use in event patterns", "Matching on arrays", "Matching null values and empty
//! strings") and from `aws/event-ruler`, the open-source matcher behind EventBridge:
//!
//! - Fields of one object are AND; the values in one array are OR; `"$or": [{..}, {..}]` (at least
//!   two non-empty objects) is an OR of sub-patterns over the same object, ANDed with its
//!   siblings. Fields of the event that the pattern does not name are ignored.
//! - Conditions apply to *leaf* values: strings, numbers, booleans and null. A field holding an
//!   object is an intermediate node, not a value: no condition matches it except `exists: false`.
//! - An array in the event matches when any element matches; nested arrays are flattened. A nested
//!   pattern object applied to an array of objects must match within one element (EventBridge's
//!   array-consistent matching), so `{"a": {"x": [1], "y": [2]}}` does not match
//!   `{"a": [{"x": 1}, {"y": 2}]}`.
//! - `exists: true` needs at least one leaf value at the path, and null counts ("the value of the
//!   field is not considered"). `exists: false` matches a missing field, a field holding an
//!   object ("exists only works on leaf nodes"), and an empty array (it holds no leaf).
//! - A missing field matches nothing but `exists: false`: not `[null]` (null and absent are not
//!   interchangeable) and not `anything-but` (it needs a value to compare).
//! - `anything-but` matches every present leaf that is not excluded, including null and booleans
//!   (AWS matches `{"anything-but": ["baz"]}` against null; see localstack/localstack#9711). Its
//!   `prefix`, `suffix`, `equals-ignore-case` and `wildcard` forms exclude strings only.
//! - String operators (`prefix`, `suffix`, `equals-ignore-case`, `wildcard`, `cidr`) match strings
//!   only. `numeric` matches JSON numbers only: the string "5" is not the number 5. Exact numbers
//!   compare by value, so `[5]` matches `5.0`.
//!
//! Deliberate differences, all at edges no baton config should reach:
//! - `numeric` compares full `f64` values; EventBridge limits bounds to about ±5e9 with six
//!   decimal places. baton enforces no such limit.
//! - A field name containing a dot is only that field; EventBridge also lets `"a.b"` reach
//!   `{"a": {"b": ..}}`.
//! - `exists: false` inside a nested pattern applied to an array of objects is judged per element,
//!   like every other condition there; EventBridge judges absence over the whole event.
//! - A field named `numeric` whose array starts with a comparison operator (`{"total":
//!   {"numeric": [">", 5]}}`) is refused as a misplaced operator. EventBridge accepts it as a
//!   field literally called `numeric` holding ">" or 5, which never matches what the author meant.
//! - Case-insensitive operators compare Unicode lowercase forms.

use std::fmt;
use std::net::IpAddr;

use serde_json::{Map, Number, Value};

/// The key that makes an object level an OR of sub-patterns.
const OR_KEY: &str = "$or";

/// Operator names. Inside `$or` they may not be used as field names (EventBridge refuses them
/// there, since `{"$or": [{"prefix": ..}, ..]}` is almost always a misplaced operator).
const OPERATORS: [&str; 8] =
    ["prefix", "suffix", "equals-ignore-case", "wildcard", "anything-but", "numeric", "exists", "cidr"];

const NUMERIC_OPERATORS: [&str; 5] = ["=", "<", "<=", ">", ">="];

/// A compiled EventBridge event pattern.
#[derive(Debug, Clone, PartialEq)]
pub struct Pattern {
    root: Fields,
}

/// Why a pattern was refused, and where.
///
/// `path` is relative to the pattern root, built from `.field` and `[i]` segments (for example
/// `data.total[0].numeric`), and is empty for the root itself. A field name that is not a plain
/// word is written JSON-quoted in brackets: `data["a.b"]`. Callers prefix it with the location of
/// the pattern in their own document.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", PathAndMessage(.path, .message))]
pub struct PatternError {
    pub path: String,
    pub message: String,
}

impl PatternError {
    fn new(path: &str, message: impl Into<String>) -> Self {
        Self { path: path.to_owned(), message: message.into() }
    }
}

/// Renders `path: message`, or only the message when the error is about the root.
struct PathAndMessage<'a>(&'a String, &'a String);

impl fmt::Display for PathAndMessage<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let PathAndMessage(path, message) = self;
        if path.is_empty() { f.write_str(message) } else { write!(f, "{path}: {message}") }
    }
}

impl Pattern {
    /// Compile a pattern from its JSON form. Errors name the path inside the pattern, e.g.
    /// `data.total[0].numeric`, and say what was expected.
    pub fn parse(pattern: &Value) -> Result<Pattern, PatternError> {
        let Value::Object(fields) = pattern else {
            return Err(PatternError::new(
                "",
                format!(
                    "an event pattern must be a JSON object of fields, such as \
                     {{\"type\": [\"order.placed\"]}}; got {}",
                    describe(pattern)
                ),
            ));
        };
        Ok(Pattern { root: parse_fields(fields, "", false)? })
    }

    /// Does the event (a JSON object) match? Anything other than an object has no fields, so
    /// only patterns made of `exists: false` match it.
    pub fn matches(&self, event: &Value) -> bool {
        self.root.matches(event.as_object())
    }

    /// The exact strings the top-level `field` must equal for this pattern to match an event
    /// whose `field` is a string: `Some` only when the pattern has `"field": [..]` made of
    /// string values alone (an AND with the rest, outside any `$or`). `None`: the pattern does
    /// not pin `field` to a list of strings, so it may match any value of it.
    pub fn required_strings(&self, field: &str) -> Option<Vec<&str>> {
        self.root.0.iter().find_map(|node| match node {
            Node::Field { name, rule: Rule::AnyCondition(conditions) } if name == field => conditions
                .iter()
                .map(|c| match c {
                    Condition::Equals(Scalar::String(text)) => Some(text.as_str()),
                    _ => None,
                })
                .collect(),
            _ => None,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// The compiled tree.

/// One object level of the pattern: every node must match (AND).
#[derive(Debug, Clone, PartialEq)]
struct Fields(Vec<Node>);

#[derive(Debug, Clone, PartialEq)]
enum Node {
    /// `"name": [..]` or `"name": {..}`.
    Field { name: String, rule: Rule },
    /// `"$or": [{..}, {..}]`: at least one branch matches this same object.
    AnyOf(Vec<Fields>),
}

#[derive(Debug, Clone, PartialEq)]
enum Rule {
    /// `"name": {..}`: match inside the event's nested object.
    Nested(Fields),
    /// `"name": [..]`: at least one condition matches the field's leaf values.
    AnyCondition(Vec<Condition>),
}

#[derive(Debug, Clone, PartialEq)]
enum Condition {
    Equals(Scalar),
    Prefix(Affix),
    Suffix(Affix),
    /// Stored lowercased.
    EqualsIgnoreCase(String),
    Wildcard(Wildcard),
    Numeric(Range),
    Exists(bool),
    Cidr(Cidr),
    AnythingBut(Exclusion),
}

#[derive(Debug, Clone, PartialEq)]
enum Scalar {
    Null,
    Bool(bool),
    Number(Number),
    String(String),
}

/// A prefix or suffix; lowercased when `ignore_case`.
#[derive(Debug, Clone, PartialEq)]
struct Affix {
    text: String,
    ignore_case: bool,
}

/// What an `anything-but` excludes. Everything else that is a present leaf matches.
#[derive(Debug, Clone, PartialEq)]
enum Exclusion {
    Strings(Vec<String>),
    Numbers(Vec<Number>),
    Prefix(String),
    Suffix(String),
    /// Stored lowercased.
    IgnoringCase(Vec<String>),
    Wildcards(Vec<Wildcard>),
}

/// A numeric interval; `=` is the closed interval of one point.
#[derive(Debug, Clone, PartialEq)]
struct Range {
    lower: Option<Bound>,
    upper: Option<Bound>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Bound {
    value: f64,
    inclusive: bool,
}

/// A wildcard split on its unescaped stars: `pieces.len()` is the number of stars plus one, and
/// only the first and last pieces can be empty (consecutive stars are refused).
#[derive(Debug, Clone, PartialEq)]
struct Wildcard {
    pieces: Vec<String>,
}

/// An address block, stored with the host bits already cleared.
#[derive(Debug, Clone, PartialEq)]
enum Cidr {
    V4 { network: u32, mask: u32 },
    V6 { network: u128, mask: u128 },
}

// ---------------------------------------------------------------------------------------------
// Matching.

impl Fields {
    /// Match this level against an event object; `None` (absent, or not an object) has no fields.
    fn matches(&self, object: Option<&Map<String, Value>>) -> bool {
        self.0.iter().all(|node| match node {
            Node::Field { name, rule } => rule.matches(object.and_then(|o| o.get(name))),
            Node::AnyOf(branches) => branches.iter().any(|branch| branch.matches(object)),
        })
    }

    /// Match a nested pattern against whatever the event holds at its field. An array of objects
    /// matches when one element does; a value with no object in it has no fields.
    fn matches_value(&self, value: Option<&Value>) -> bool {
        let mut objects = Vec::new();
        if let Some(value) = value {
            collect_objects(value, &mut objects);
        }
        if objects.is_empty() {
            self.matches(None)
        } else {
            objects.into_iter().any(|object| self.matches(Some(object)))
        }
    }
}

impl Rule {
    fn matches(&self, value: Option<&Value>) -> bool {
        match self {
            Rule::Nested(fields) => fields.matches_value(value),
            Rule::AnyCondition(conditions) => {
                let mut leaves = Vec::new();
                if let Some(value) = value {
                    collect_leaves(value, &mut leaves);
                }
                conditions.iter().any(|condition| condition.matches(&leaves))
            }
        }
    }
}

/// The objects a value holds: itself, or the objects anywhere in its (nested) arrays.
fn collect_objects<'a>(value: &'a Value, out: &mut Vec<&'a Map<String, Value>>) {
    match value {
        Value::Object(object) => out.push(object),
        Value::Array(items) => items.iter().for_each(|item| collect_objects(item, out)),
        _ => {}
    }
}

/// The leaf values a field holds: itself if scalar, the scalars in its (nested) arrays, and
/// nothing for an object.
fn collect_leaves<'a>(value: &'a Value, out: &mut Vec<&'a Value>) {
    match value {
        Value::Object(_) => {}
        Value::Array(items) => items.iter().for_each(|item| collect_leaves(item, out)),
        scalar => out.push(scalar),
    }
}

impl Condition {
    fn matches(&self, leaves: &[&Value]) -> bool {
        match self {
            Condition::Exists(wanted) => {
                let present = !leaves.is_empty();
                present == *wanted
            }
            condition => leaves.iter().any(|leaf| condition.matches_leaf(leaf)),
        }
    }

    fn matches_leaf(&self, leaf: &Value) -> bool {
        match self {
            Condition::Equals(scalar) => scalar.equals(leaf),
            Condition::Prefix(affix) => leaf.as_str().is_some_and(|s| affix.is_prefix_of(s)),
            Condition::Suffix(affix) => leaf.as_str().is_some_and(|s| affix.is_suffix_of(s)),
            Condition::EqualsIgnoreCase(lower) => leaf.as_str().is_some_and(|s| s.to_lowercase() == *lower),
            Condition::Wildcard(wildcard) => leaf.as_str().is_some_and(|s| wildcard.matches(s)),
            Condition::Numeric(range) => match leaf {
                Value::Number(n) => n.as_f64().is_some_and(|x| range.contains(x)),
                _ => false,
            },
            Condition::Cidr(cidr) => leaf.as_str().is_some_and(|s| cidr.contains(s)),
            Condition::AnythingBut(exclusion) => !exclusion.excludes(leaf),
            // Judged over all the leaves at once in `matches`; on its own, one leaf is present.
            Condition::Exists(wanted) => *wanted,
        }
    }
}

impl Scalar {
    fn equals(&self, leaf: &Value) -> bool {
        match (self, leaf) {
            (Scalar::Null, Value::Null) => true,
            (Scalar::Bool(a), Value::Bool(b)) => a == b,
            (Scalar::Number(a), Value::Number(b)) => numbers_equal(a, b),
            (Scalar::String(a), Value::String(b)) => a == b,
            _ => false,
        }
    }
}

/// Numeric equality: integers exactly (past 2^53 an f64 would merge neighbours), anything else
/// as f64, so `5` equals `5.0`.
fn numbers_equal(a: &Number, b: &Number) -> bool {
    fn integer(n: &Number) -> Option<i128> {
        n.as_i64().map(i128::from).or_else(|| n.as_u64().map(i128::from))
    }
    match (integer(a), integer(b)) {
        (Some(x), Some(y)) => x == y,
        _ => matches!((a.as_f64(), b.as_f64()), (Some(x), Some(y)) if x == y),
    }
}

impl Affix {
    fn is_prefix_of(&self, s: &str) -> bool {
        if self.ignore_case { s.to_lowercase().starts_with(&self.text) } else { s.starts_with(&self.text) }
    }

    fn is_suffix_of(&self, s: &str) -> bool {
        if self.ignore_case { s.to_lowercase().ends_with(&self.text) } else { s.ends_with(&self.text) }
    }
}

impl Exclusion {
    fn excludes(&self, leaf: &Value) -> bool {
        match (self, leaf) {
            (Exclusion::Strings(values), Value::String(s)) => values.iter().any(|v| v == s),
            (Exclusion::Numbers(values), Value::Number(n)) => values.iter().any(|v| numbers_equal(v, n)),
            (Exclusion::Prefix(prefix), Value::String(s)) => s.starts_with(prefix.as_str()),
            (Exclusion::Suffix(suffix), Value::String(s)) => s.ends_with(suffix.as_str()),
            (Exclusion::IgnoringCase(values), Value::String(s)) => {
                let lower = s.to_lowercase();
                values.contains(&lower)
            }
            (Exclusion::Wildcards(wildcards), Value::String(s)) => wildcards.iter().any(|w| w.matches(s)),
            _ => false,
        }
    }
}

impl Range {
    fn contains(&self, x: f64) -> bool {
        let above = self.lower.is_none_or(|b| if b.inclusive { x >= b.value } else { x > b.value });
        let below = self.upper.is_none_or(|b| if b.inclusive { x <= b.value } else { x < b.value });
        above && below
    }
}

impl Wildcard {
    fn matches(&self, s: &str) -> bool {
        match self.pieces.as_slice() {
            [] => false,
            [literal] => s == literal,
            [first, middle @ .., last] => {
                let Some(rest) = s.strip_prefix(first.as_str()) else {
                    return false;
                };
                let Some(mut rest) = rest.strip_suffix(last.as_str()) else {
                    return false;
                };
                // With only `*` between pieces, taking each piece at its leftmost occurrence
                // leaves the most room for the ones after it, so no backtracking is needed.
                for piece in middle {
                    match rest.find(piece.as_str()) {
                        Some(at) => rest = &rest[at + piece.len()..],
                        None => return false,
                    }
                }
                true
            }
        }
    }
}

impl Cidr {
    fn contains(&self, address: &str) -> bool {
        match (self, address.parse::<IpAddr>()) {
            (Cidr::V4 { network, mask }, Ok(IpAddr::V4(ip))) => u32::from(ip) & mask == *network,
            (Cidr::V6 { network, mask }, Ok(IpAddr::V6(ip))) => u128::from(ip) & mask == *network,
            _ => false,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Parsing.

fn parse_fields(object: &Map<String, Value>, path: &str, in_or: bool) -> Result<Fields, PatternError> {
    if object.is_empty() {
        return Err(PatternError::new(
            path,
            "empty object: name at least one field to match, such as {\"type\": [\"order.placed\"]}",
        ));
    }
    let mut nodes = Vec::with_capacity(object.len());
    for (name, value) in object {
        let child = field_path(path, name);
        if name == OR_KEY {
            nodes.push(Node::AnyOf(parse_any_of(value, &child)?));
            continue;
        }
        if in_or && OPERATORS.contains(&name.as_str()) {
            return Err(PatternError::new(
                &child,
                format!(
                    "\"{name}\" is an operator and cannot be a field name inside $or; \
                     put it in a field's array, such as {{\"total\": [{{\"{name}\": ...}}]}}"
                ),
            ));
        }
        let rule = match value {
            Value::Object(nested) => Rule::Nested(parse_fields(nested, &child, in_or)?),
            Value::Array(items) => {
                if name == "numeric" {
                    refuse_misplaced_numeric(items, &child)?;
                }
                Rule::AnyCondition(parse_conditions(items, &child)?)
            }
            other => {
                return Err(PatternError::new(
                    &child,
                    format!(
                        "expected an array of match conditions, such as [\"order.placed\"], or an \
                         object of nested fields; got {}",
                        describe(other)
                    ),
                ));
            }
        };
        nodes.push(Node::Field { name: name.clone(), rule });
    }
    Ok(Fields(nodes))
}

/// `{"total": {"numeric": [">", 5]}}` is a numeric condition missing its array. EventBridge would
/// read it as a field called `numeric` and never match; refuse it while the author is looking.
fn refuse_misplaced_numeric(items: &[Value], path: &str) -> Result<(), PatternError> {
    match items.first() {
        Some(Value::String(op)) if NUMERIC_OPERATORS.contains(&op.as_str()) => Err(PatternError::new(
            path,
            "this looks like a numeric condition without its array: write \
                 \"total\": [{\"numeric\": [\">\", 5]}], not \"total\": {\"numeric\": [\">\", 5]}",
        )),
        _ => Ok(()),
    }
}

fn parse_any_of(value: &Value, path: &str) -> Result<Vec<Fields>, PatternError> {
    let Value::Array(branches) = value else {
        return Err(PatternError::new(
            path,
            format!(
                "$or takes an array of at least two pattern objects, such as \
                 [{{\"type\": [\"a\"]}}, {{\"source\": [\"b\"]}}]; got {}",
                describe(value)
            ),
        ));
    };
    if branches.len() < 2 {
        return Err(PatternError::new(
            path,
            format!(
                "$or needs at least two alternatives, got {}; with a single alternative, put its \
                 fields directly in the enclosing object",
                branches.len()
            ),
        ));
    }
    branches
        .iter()
        .enumerate()
        .map(|(i, branch)| {
            let branch_path = index_path(path, i);
            match branch {
                Value::Object(fields) => parse_fields(fields, &branch_path, true),
                other => Err(PatternError::new(
                    &branch_path,
                    format!(
                        "each $or alternative must be a pattern object, such as \
                         {{\"type\": [\"a\"]}}; got {}",
                        describe(other)
                    ),
                )),
            }
        })
        .collect()
}

fn parse_conditions(items: &[Value], path: &str) -> Result<Vec<Condition>, PatternError> {
    if items.is_empty() {
        return Err(PatternError::new(
            path,
            "empty array: list at least one value or operator to match, such as \
             [\"order.placed\"] or [{\"exists\": true}]",
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let item_path = index_path(path, i);
            Ok(match item {
                Value::Null => Condition::Equals(Scalar::Null),
                Value::Bool(b) => Condition::Equals(Scalar::Bool(*b)),
                Value::Number(n) => Condition::Equals(Scalar::Number(n.clone())),
                Value::String(s) => Condition::Equals(Scalar::String(s.clone())),
                Value::Object(operator) => parse_operator(operator, &item_path)?,
                Value::Array(_) => {
                    return Err(PatternError::new(
                        &item_path,
                        "a match condition must be a string, number, boolean, null or an operator \
                         object such as {\"prefix\": \"ord\"}; got an array (arrays do not nest)",
                    ));
                }
            })
        })
        .collect()
}

fn parse_operator(operator: &Map<String, Value>, path: &str) -> Result<Condition, PatternError> {
    let mut entries = operator.iter();
    let (Some((name, operand)), None) = (entries.next(), entries.next()) else {
        let message = if operator.is_empty() {
            "empty operator object: give exactly one operator, such as {\"prefix\": \"ord\"}".to_owned()
        } else {
            let keys: Vec<&str> = operator.keys().map(String::as_str).collect();
            format!(
                "an operator object takes exactly one operator, found {} ({}); give each its own \
                 object in the array, such as [{{\"prefix\": \"a\"}}, {{\"suffix\": \"b\"}}]",
                keys.len(),
                keys.join(", ")
            )
        };
        return Err(PatternError::new(path, message));
    };
    let path = field_path(path, name);
    let path = path.as_str();
    Ok(match name.as_str() {
        "prefix" => Condition::Prefix(parse_affix(operand, path, "prefix")?),
        "suffix" => Condition::Suffix(parse_affix(operand, path, "suffix")?),
        "equals-ignore-case" => {
            Condition::EqualsIgnoreCase(expect_string(operand, path, "equals-ignore-case")?.to_lowercase())
        }
        "wildcard" => Condition::Wildcard(Wildcard::parse(expect_string(operand, path, "wildcard")?, path)?),
        "numeric" => Condition::Numeric(parse_range(operand, path)?),
        "exists" => match operand {
            Value::Bool(wanted) => Condition::Exists(*wanted),
            other => {
                return Err(PatternError::new(
                    path,
                    format!("exists takes true or false; got {}", describe(other)),
                ));
            }
        },
        "cidr" => Condition::Cidr(Cidr::parse(expect_string(operand, path, "cidr")?, path)?),
        "anything-but" => Condition::AnythingBut(parse_exclusion(operand, path)?),
        unknown => return Err(unknown_operator(unknown, path)),
    })
}

fn unknown_operator(name: &str, path: &str) -> PatternError {
    let suggestion = OPERATORS
        .iter()
        .map(|known| (edit_distance(name, known), known))
        .filter(|(distance, _)| *distance <= 2)
        .min()
        .map(|(_, known)| format!(" (did you mean \"{known}\"?)"))
        .unwrap_or_default();
    PatternError::new(
        path,
        format!("unknown operator \"{name}\"{suggestion}; expected one of {}", OPERATORS.join(", ")),
    )
}

/// Levenshtein distance, for "did you mean" hints on operator names.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current.push(substitution.min(previous[j + 1] + 1).min(current[j] + 1));
        }
        previous = current;
    }
    previous[b.len()]
}

fn expect_string<'a>(operand: &'a Value, path: &str, operator: &str) -> Result<&'a str, PatternError> {
    operand.as_str().ok_or_else(|| {
        PatternError::new(path, format!("{operator} takes a string; got {}", describe(operand)))
    })
}

/// `"prefix": "ord"` or `"prefix": {"equals-ignore-case": "ORD"}` (and the same for suffix).
fn parse_affix(operand: &Value, path: &str, operator: &str) -> Result<Affix, PatternError> {
    let expected = format!("{operator} takes a string, or {{\"equals-ignore-case\": \"...\"}}");
    match operand {
        Value::String(text) => Ok(Affix { text: text.clone(), ignore_case: false }),
        Value::Object(inner) => {
            let mut entries = inner.iter();
            match (entries.next(), entries.next()) {
                (Some((key, Value::String(text))), None) if key == "equals-ignore-case" => {
                    Ok(Affix { text: text.to_lowercase(), ignore_case: true })
                }
                (Some((key, other)), None) if key == "equals-ignore-case" => Err(PatternError::new(
                    &field_path(path, key),
                    format!("equals-ignore-case takes a string; got {}", describe(other)),
                )),
                _ => {
                    let keys: Vec<&str> = inner.keys().map(String::as_str).collect();
                    Err(PatternError::new(
                        path,
                        format!("{expected}; got an object with keys [{}]", keys.join(", ")),
                    ))
                }
            }
        }
        other => Err(PatternError::new(path, format!("{expected}; got {}", describe(other)))),
    }
}

/// The comparison at `items[at]`, `items[at + 1]` of a `numeric` operand: a known operator and
/// a JSON number.
fn numeric_comparison<'a>(items: &'a [Value], path: &str, at: usize) -> Result<(&'a str, f64), PatternError> {
    let op = match &items[at] {
        Value::String(op) if NUMERIC_OPERATORS.contains(&op.as_str()) => op.as_str(),
        Value::String(op) => {
            return Err(PatternError::new(
                &index_path(path, at),
                format!(
                    "unknown numeric operator \"{op}\"; expected one of {}",
                    NUMERIC_OPERATORS.join(", ")
                ),
            ));
        }
        other => {
            return Err(PatternError::new(
                &index_path(path, at),
                format!(
                    "expected a comparison operator ({}) here; got {}",
                    NUMERIC_OPERATORS.join(", "),
                    describe(other)
                ),
            ));
        }
    };
    let bound = match &items[at + 1] {
        Value::Number(n) => n.as_f64(),
        _ => None,
    };
    let bound = bound.ok_or_else(|| {
        PatternError::new(
            &index_path(path, at + 1),
            format!(
                "expected a number after \"{op}\"; got {} (numbers are matched only against \
                     JSON numbers, so write 5, not \"5\")",
                describe(&items[at + 1])
            ),
        )
    })?;
    Ok((op, bound))
}

/// `[op, n]` with op one of `= < <= > >=`, or `[> or >=, low, < or <=, high]` with low < high.
fn parse_range(operand: &Value, path: &str) -> Result<Range, PatternError> {
    let Value::Array(items) = operand else {
        return Err(PatternError::new(
            path,
            format!(
                "numeric takes an array of comparisons, such as [\">=\", 10] or \
                 [\">\", 0, \"<=\", 5]; got {}",
                describe(operand)
            ),
        ));
    };
    if items.len() != 2 && items.len() != 4 {
        return Err(PatternError::new(
            path,
            format!(
                "numeric takes one comparison (an operator and a number, such as [\">=\", 10]) or \
                 two forming a range, lower bound first (such as [\">\", 0, \"<=\", 5]); got {} \
                 element{}",
                items.len(),
                if items.len() == 1 { "" } else { "s" }
            ),
        ));
    }
    let (op, value) = numeric_comparison(items, path, 0)?;
    if items.len() == 2 {
        let bound = |inclusive| Some(Bound { value, inclusive });
        return Ok(match op {
            "=" => Range { lower: bound(true), upper: bound(true) },
            ">" => Range { lower: bound(false), upper: None },
            ">=" => Range { lower: bound(true), upper: None },
            "<" => Range { lower: None, upper: bound(false) },
            _ => Range { lower: None, upper: bound(true) },
        });
    }

    if op != ">" && op != ">=" {
        return Err(PatternError::new(
            &index_path(path, 0),
            format!(
                "a two-comparison range starts with its lower bound (\">\" or \">=\"), then its \
                 upper bound (\"<\" or \"<=\"), such as [\">\", 0, \"<=\", 5]; got \"{op}\" first"
            ),
        ));
    }
    let lower = Bound { value, inclusive: op == ">=" };
    let (op, value) = numeric_comparison(items, path, 2)?;
    if op != "<" && op != "<=" {
        return Err(PatternError::new(
            &index_path(path, 2),
            format!(
                "the second comparison of a range is its upper bound (\"<\" or \"<=\"), such as \
                 [\">\", 0, \"<=\", 5]; got \"{op}\""
            ),
        ));
    }
    let upper = Bound { value, inclusive: op == "<=" };
    if lower.value >= upper.value {
        return Err(PatternError::new(
            path,
            format!(
                "empty range: the lower bound {} must be below the upper bound {}",
                lower.value, upper.value
            ),
        ));
    }
    Ok(Range { lower: Some(lower), upper: Some(upper) })
}

/// The operand of `anything-but`: a string or number, a non-empty list of only strings or only
/// numbers, or one of `{"prefix": s}`, `{"suffix": s}`, `{"equals-ignore-case": s | [s..]}`,
/// `{"wildcard": s | [s..]}`.
fn parse_exclusion(operand: &Value, path: &str) -> Result<Exclusion, PatternError> {
    const EXPECTED: &str = "anything-but takes a string, a number, a list of only strings or only \
                            numbers, or an object with one of prefix, suffix, equals-ignore-case, \
                            wildcard";
    match operand {
        Value::String(s) => Ok(Exclusion::Strings(vec![s.clone()])),
        Value::Number(n) => Ok(Exclusion::Numbers(vec![n.clone()])),
        Value::Array(items) => parse_exclusion_list(items, path),
        Value::Object(inner) => {
            let mut entries = inner.iter();
            let (Some((key, value)), None) = (entries.next(), entries.next()) else {
                let keys: Vec<&str> = inner.keys().map(String::as_str).collect();
                return Err(PatternError::new(
                    path,
                    format!("{EXPECTED}; got an object with keys [{}]", keys.join(", ")),
                ));
            };
            let inner_path = field_path(path, key);
            match key.as_str() {
                "prefix" | "suffix" => {
                    let text = match value {
                        Value::String(text) if !text.is_empty() => text.clone(),
                        Value::String(_) => {
                            return Err(PatternError::new(
                                &inner_path,
                                format!(
                                    "anything-but {key} must not be empty: it would exclude every \
                                     string"
                                ),
                            ));
                        }
                        other => {
                            return Err(PatternError::new(
                                &inner_path,
                                format!(
                                    "anything-but {key} takes one non-empty string; got {}",
                                    describe(other)
                                ),
                            ));
                        }
                    };
                    Ok(if key == "prefix" { Exclusion::Prefix(text) } else { Exclusion::Suffix(text) })
                }
                "equals-ignore-case" => Ok(Exclusion::IgnoringCase(
                    strings_or_list(value, &inner_path, key)?.into_iter().map(|s| s.to_lowercase()).collect(),
                )),
                "wildcard" => {
                    let patterns = strings_or_list(value, &inner_path, key)?;
                    let single = matches!(value, Value::String(_));
                    let wildcards = patterns
                        .iter()
                        .enumerate()
                        .map(|(i, text)| {
                            let at = if single { inner_path.clone() } else { index_path(&inner_path, i) };
                            Wildcard::parse(text, &at)
                        })
                        .collect::<Result<_, _>>()?;
                    Ok(Exclusion::Wildcards(wildcards))
                }
                other => Err(PatternError::new(
                    &inner_path,
                    format!("{EXPECTED}; \"{other}\" cannot be used inside anything-but"),
                )),
            }
        }
        other => Err(PatternError::new(path, format!("{EXPECTED}; got {}", describe(other)))),
    }
}

fn parse_exclusion_list(items: &[Value], path: &str) -> Result<Exclusion, PatternError> {
    let Some(first) = items.first() else {
        return Err(PatternError::new(
            path,
            "anything-but needs at least one value to exclude; got an empty array",
        ));
    };
    let numbers = first.is_number();
    let mut strings_out = Vec::new();
    let mut numbers_out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match item {
            Value::String(s) if !numbers => strings_out.push(s.clone()),
            Value::Number(n) if numbers => numbers_out.push(n.clone()),
            Value::String(_) | Value::Number(_) => {
                return Err(PatternError::new(
                    &index_path(path, i),
                    "an anything-but list holds only strings or only numbers, not a mix",
                ));
            }
            other => {
                return Err(PatternError::new(
                    &index_path(path, i),
                    format!(
                        "an anything-but list holds only strings or only numbers; got {}",
                        describe(other)
                    ),
                ));
            }
        }
    }
    Ok(if numbers { Exclusion::Numbers(numbers_out) } else { Exclusion::Strings(strings_out) })
}

/// A string, or a non-empty array of strings.
fn strings_or_list(value: &Value, path: &str, operator: &str) -> Result<Vec<String>, PatternError> {
    match value {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Array(items) if !items.is_empty() => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                item.as_str().map(str::to_owned).ok_or_else(|| {
                    PatternError::new(
                        &index_path(path, i),
                        format!("anything-but {operator} lists hold strings; got {}", describe(item)),
                    )
                })
            })
            .collect(),
        other => Err(PatternError::new(
            path,
            format!(
                "anything-but {operator} takes a string or a non-empty list of strings; got {}",
                describe(other)
            ),
        )),
    }
}

impl Wildcard {
    /// `*` matches any run of characters (including none), `\*` is a literal star and `\\` a
    /// literal backslash. Consecutive stars and other escapes are refused, as EventBridge does.
    fn parse(text: &str, path: &str) -> Result<Wildcard, PatternError> {
        let mut pieces = vec![String::new()];
        let mut previous_was_star = false;
        let mut chars = text.chars().enumerate();
        while let Some((at, c)) = chars.next() {
            let literal = match c {
                '*' => {
                    if previous_was_star {
                        return Err(PatternError::new(
                            path,
                            format!(
                                "consecutive * at character {} of wildcard {}: one * already \
                                 matches any run of characters",
                                at + 1,
                                Value::from(text)
                            ),
                        ));
                    }
                    previous_was_star = true;
                    pieces.push(String::new());
                    continue;
                }
                '\\' => match chars.next() {
                    Some((_, escaped @ ('*' | '\\'))) => escaped,
                    Some((_, other)) => {
                        return Err(PatternError::new(
                            path,
                            format!(
                                "\\{other} at character {} of wildcard {} is not an escape: only \
                                 \\* (a literal star) and \\\\ (a literal backslash) are",
                                at + 1,
                                Value::from(text)
                            ),
                        ));
                    }
                    None => {
                        return Err(PatternError::new(
                            path,
                            format!(
                                "wildcard {} ends with a lone backslash; write \\\\ for a literal \
                                 backslash",
                                Value::from(text)
                            ),
                        ));
                    }
                },
                other => other,
            };
            previous_was_star = false;
            if let Some(last) = pieces.last_mut() {
                last.push(literal);
            }
        }
        Ok(Wildcard { pieces })
    }
}

impl Cidr {
    fn parse(text: &str, path: &str) -> Result<Cidr, PatternError> {
        const EXPECTED: &str = "cidr takes an address block such as \"10.0.0.0/24\" or \
                                \"2001:db8::/32\"";
        let Some((address, length)) = text.split_once('/') else {
            return Err(PatternError::new(
                path,
                format!("{EXPECTED}; {} has no /prefix-length", Value::from(text)),
            ));
        };
        let address: IpAddr = address.parse().map_err(|_| {
            PatternError::new(
                path,
                format!("{EXPECTED}; {} is not an IPv4 or IPv6 address", Value::from(address)),
            )
        })?;
        let bits = if address.is_ipv4() { 32 } else { 128 };
        let length = length.parse::<u32>().ok().filter(|l| *l <= bits).ok_or_else(|| {
            PatternError::new(
                path,
                format!(
                    "{EXPECTED}; the prefix length {} must be a whole number from 0 to {bits}",
                    Value::from(length)
                ),
            )
        })?;
        Ok(match address {
            IpAddr::V4(ip) => {
                let mask = u32::MAX.checked_shl(32 - length).unwrap_or(0);
                Cidr::V4 { network: u32::from(ip) & mask, mask }
            }
            IpAddr::V6(ip) => {
                let mask = u128::MAX.checked_shl(128 - length).unwrap_or(0);
                Cidr::V6 { network: u128::from(ip) & mask, mask }
            }
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Paths and descriptions for error messages.

/// `parent.name`, or `parent["odd name"]` when the name is not a plain word.
fn field_path(parent: &str, name: &str) -> String {
    let plain = !name.is_empty()
        && name.chars().all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '$' | '@' | ':' | '/'));
    match (plain, parent.is_empty()) {
        (true, true) => name.to_owned(),
        (true, false) => format!("{parent}.{name}"),
        (false, _) => format!("{parent}[{}]", Value::from(name)),
    }
}

fn index_path(parent: &str, index: usize) -> String {
    format!("{parent}[{index}]")
}

/// How a JSON value reads in an error message.
fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {}", Value::from(s.as_str())),
        Value::Array(_) => "an array".to_owned(),
        Value::Object(_) => "an object".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pattern(value: Value) -> Pattern {
        match Pattern::parse(&value) {
            Ok(pattern) => pattern,
            Err(error) => panic!("test pattern {value} should parse, got: {error}"),
        }
    }

    fn refused(value: Value) -> PatternError {
        match Pattern::parse(&value) {
            Ok(pattern) => panic!("pattern {value} should be refused, got {pattern:?}"),
            Err(error) => error,
        }
    }

    /// Asserts which of `events` the pattern matches, naming the event that disagrees.
    fn assert_matches(pattern_json: Value, cases: &[(Value, bool)]) {
        let compiled = pattern(pattern_json.clone());
        for (event, expected) in cases {
            assert_eq!(
                compiled.matches(event),
                *expected,
                "pattern {pattern_json} against event {event}: expected {expected}"
            );
        }
    }

    fn assert_refused(pattern_json: Value, path: &str, message_parts: &[&str]) {
        let error = refused(pattern_json.clone());
        assert_eq!(error.path, path, "path for {pattern_json}: {error}");
        for part in message_parts {
            assert!(
                error.message.contains(part),
                "message for {pattern_json} should contain {part:?}: {}",
                error.message
            );
        }
    }

    // --- Structure: AND, OR, nesting, $or -------------------------------------------------------

    #[test]
    fn given_two_fields_when_both_or_one_match_then_only_both_matches() {
        assert_matches(
            json!({"source": ["shop"], "type": ["order.placed"]}),
            &[
                (json!({"source": "shop", "type": "order.placed", "id": "1"}), true),
                (json!({"source": "shop", "type": "order.paid"}), false),
                (json!({"type": "order.placed"}), false),
            ],
        );
    }

    #[test]
    fn given_several_values_in_an_array_when_any_equals_then_matches() {
        assert_matches(
            json!({"type": ["order.placed", "order.paid"]}),
            &[
                (json!({"type": "order.paid"}), true),
                (json!({"type": "order.placed"}), true),
                (json!({"type": "order.cancelled"}), false),
            ],
        );
    }

    #[test]
    fn given_nested_pattern_when_event_nests_the_same_then_matches_inside() {
        assert_matches(
            json!({"data": {"customer": {"tier": ["gold"]}}}),
            &[
                (json!({"data": {"customer": {"tier": "gold", "name": "x"}}}), true),
                (json!({"data": {"customer": {"tier": "silver"}}}), false),
                (json!({"data": {"tier": "gold"}}), false),
                (json!({"data": "gold"}), false),
                (json!({}), false),
            ],
        );
    }

    #[test]
    fn given_or_when_either_branch_matches_then_matches_and_siblings_still_apply() {
        let p = json!({
            "source": ["shop"],
            "$or": [{"type": ["order.placed"]}, {"data": {"total": [{"numeric": [">", 100]}]}}]
        });
        assert_matches(
            p,
            &[
                (json!({"source": "shop", "type": "order.placed"}), true),
                (json!({"source": "shop", "type": "x", "data": {"total": 101}}), true),
                (json!({"source": "shop", "type": "x", "data": {"total": 5}}), false),
                (json!({"source": "other", "type": "order.placed"}), false),
            ],
        );
    }

    #[test]
    fn given_nested_or_inside_a_field_when_matched_then_applies_to_that_object() {
        assert_matches(
            json!({"data": {"$or": [{"a": [1]}, {"b": [2]}], "c": [3]}}),
            &[
                (json!({"data": {"a": 1, "c": 3}}), true),
                (json!({"data": {"b": 2, "c": 3}}), true),
                (json!({"data": {"a": 1}}), false),
                (json!({"a": 1, "c": 3}), false),
            ],
        );
    }

    #[test]
    fn given_or_branches_with_their_own_or_when_matched_then_nesting_composes() {
        assert_matches(
            json!({"$or": [
                {"a": ["x"], "$or": [{"b": [1]}, {"c": [1]}]},
                {"d": [true]}
            ]}),
            &[
                (json!({"a": "x", "c": 1}), true),
                (json!({"d": true}), true),
                (json!({"a": "x"}), false),
                (json!({"b": 1, "c": 1}), false),
            ],
        );
    }

    #[test]
    fn given_event_that_is_not_an_object_when_matched_then_it_has_no_fields() {
        assert_matches(json!({"a": ["x"]}), &[(json!("x"), false), (json!(["x"]), false)]);
        assert_matches(json!({"a": [{"exists": false}]}), &[(json!(null), true)]);
    }

    // --- Leaf values ----------------------------------------------------------------------------

    #[test]
    fn given_exact_string_when_compared_then_case_and_type_matter() {
        assert_matches(
            json!({"a": ["5"]}),
            &[
                (json!({"a": "5"}), true),
                (json!({"a": 5}), false),
                (json!({"a": "5 "}), false),
                (json!({"a": ""}), false),
            ],
        );
        assert_matches(json!({"a": ["Abc"]}), &[(json!({"a": "abc"}), false)]);
    }

    #[test]
    fn given_empty_string_value_when_compared_then_it_is_not_null() {
        assert_matches(
            json!({"a": [""]}),
            &[(json!({"a": ""}), true), (json!({"a": null}), false), (json!({}), false)],
        );
    }

    #[test]
    fn given_exact_number_when_event_has_same_value_in_another_form_then_matches() {
        assert_matches(
            json!({"a": [5]}),
            &[
                (json!({"a": 5}), true),
                (json!({"a": 5.0}), true),
                (json!({"a": 5.5}), false),
                (json!({"a": "5"}), false),
            ],
        );
        assert_matches(json!({"a": [3.018e2]}), &[(json!({"a": 301.8}), true)]);
        // Integers beyond f64 precision still compare exactly.
        assert_matches(
            json!({"a": [9_007_199_254_740_993_u64]}),
            &[
                (json!({"a": 9_007_199_254_740_993_u64}), true),
                (json!({"a": 9_007_199_254_740_992_u64}), false),
            ],
        );
    }

    #[test]
    fn given_boolean_when_compared_then_only_the_same_boolean_matches() {
        assert_matches(
            json!({"a": [true]}),
            &[
                (json!({"a": true}), true),
                (json!({"a": false}), false),
                (json!({"a": "true"}), false),
                (json!({"a": 1}), false),
            ],
        );
    }

    #[test]
    fn given_null_when_compared_then_matches_null_but_not_a_missing_field() {
        assert_matches(
            json!({"a": [null]}),
            &[
                (json!({"a": null}), true),
                (json!({}), false),
                (json!({"a": "null"}), false),
                (json!({"a": [null, 1]}), true),
            ],
        );
    }

    #[test]
    fn given_leaf_condition_when_event_holds_an_object_there_then_no_match() {
        assert_matches(
            json!({"a": ["x", {"prefix": ""}, {"anything-but": "y"}, {"exists": true}]}),
            &[(json!({"a": {"b": "x"}}), false), (json!({"a": {}}), false)],
        );
    }

    // --- Arrays in events -----------------------------------------------------------------------

    #[test]
    fn given_array_in_event_when_any_element_matches_then_matches() {
        assert_matches(
            json!({"resources": ["arn:1"]}),
            &[
                (json!({"resources": ["arn:0", "arn:1"]}), true),
                (json!({"resources": ["arn:0"]}), false),
                (json!({"resources": []}), false),
                (json!({"resources": [["arn:1"]]}), true),
            ],
        );
        assert_matches(
            json!({"a": [{"prefix": "x"}]}),
            &[(json!({"a": [1, "y", "xz"]}), true), (json!({"a": [1, "y"]}), false)],
        );
    }

    #[test]
    fn given_nested_pattern_when_event_holds_array_of_objects_then_one_element_must_match_all() {
        let p = json!({"items": {"sku": ["A"], "qty": [2]}});
        assert_matches(
            p,
            &[
                (json!({"items": [{"sku": "B", "qty": 1}, {"sku": "A", "qty": 2}]}), true),
                (json!({"items": [{"sku": "A", "qty": 1}, {"sku": "B", "qty": 2}]}), false),
                (json!({"items": [[{"sku": "A", "qty": 2}]]}), true),
                (json!({"items": []}), false),
            ],
        );
    }

    #[test]
    fn given_numeric_when_event_array_has_one_number_in_range_then_matches() {
        assert_matches(
            json!({"a": [{"numeric": [">", 10]}]}),
            &[(json!({"a": [1, 2, 30]}), true), (json!({"a": [1, "30"]}), false)],
        );
    }

    // --- prefix / suffix / equals-ignore-case / wildcard ----------------------------------------

    #[test]
    fn given_prefix_when_string_starts_with_it_then_matches_strings_only() {
        assert_matches(
            json!({"time": [{"prefix": "2017-10-02"}]}),
            &[
                (json!({"time": "2017-10-02T18:43:48Z"}), true),
                (json!({"time": "2017-10-03T00:00:00Z"}), false),
                (json!({"time": "2017-10"}), false),
                (json!({"time": 2017}), false),
                (json!({}), false),
            ],
        );
        assert_matches(json!({"a": [{"prefix": "2"}]}), &[(json!({"a": 2}), false)]);
        assert_matches(
            json!({"a": [{"prefix": ""}]}),
            &[(json!({"a": ""}), true), (json!({"a": null}), false)],
        );
    }

    #[test]
    fn given_prefix_ignoring_case_when_casing_differs_then_matches() {
        assert_matches(
            json!({"service": [{"prefix": {"equals-ignore-case": "EventB"}}]}),
            &[
                (json!({"service": "eventbridge"}), true),
                (json!({"service": "EVENTBRIDGE"}), true),
                (json!({"service": "event"}), false),
                (json!({"service": "xeventb"}), false),
            ],
        );
    }

    #[test]
    fn given_suffix_when_string_ends_with_it_then_matches() {
        assert_matches(
            json!({"FileName": [{"suffix": ".png"}]}),
            &[
                (json!({"FileName": "a.png"}), true),
                (json!({"FileName": "a.PNG"}), false),
                (json!({"FileName": "png"}), false),
            ],
        );
        assert_matches(
            json!({"FileName": [{"suffix": {"equals-ignore-case": ".png"}}]}),
            &[(json!({"FileName": "a.PNG"}), true), (json!({"FileName": "a.jpg"}), false)],
        );
    }

    #[test]
    fn given_equals_ignore_case_when_only_casing_differs_then_matches() {
        assert_matches(
            json!({"name": [{"equals-ignore-case": "alice"}]}),
            &[
                (json!({"name": "ALICE"}), true),
                (json!({"name": "Alice"}), true),
                (json!({"name": "Alicia"}), false),
                (json!({"name": ["bob", "aLiCe"]}), true),
                (json!({"name": 1}), false),
            ],
        );
    }

    #[test]
    fn given_wildcard_when_stars_stand_for_any_run_then_matches_whole_string() {
        assert_matches(
            json!({"path": [{"wildcard": "dir/*.png"}]}),
            &[
                (json!({"path": "dir/a.png"}), true),
                (json!({"path": "dir/.png"}), true),
                (json!({"path": "dir/sub/a.png"}), true),
                (json!({"path": "dir/a.png.bak"}), false),
                (json!({"path": "other/a.png"}), false),
            ],
        );
        assert_matches(
            json!({"a": [{"wildcard": "ab*ba"}]}),
            &[(json!({"a": "aba"}), false), (json!({"a": "abba"}), true), (json!({"a": "ab-ba"}), true)],
        );
        assert_matches(
            json!({"a": [{"wildcard": "*a*b*"}]}),
            &[(json!({"a": "xxaxxbxx"}), true), (json!({"a": "ab"}), true), (json!({"a": "ba"}), false)],
        );
        assert_matches(
            json!({"a": [{"wildcard": "*"}]}),
            &[(json!({"a": ""}), true), (json!({"a": 1}), false)],
        );
        assert_matches(
            json!({"a": [{"wildcard": "abc"}]}),
            &[(json!({"a": "abc"}), true), (json!({"a": "abcd"}), false)],
        );
    }

    #[test]
    fn given_escaped_star_and_backslash_in_wildcard_when_matched_then_they_are_literal() {
        assert_matches(
            json!({"a": [{"wildcard": "a\\*b"}]}),
            &[(json!({"a": "a*b"}), true), (json!({"a": "axb"}), false)],
        );
        assert_matches(
            json!({"a": [{"wildcard": "a\\\\*"}]}),
            &[(json!({"a": "a\\"}), true), (json!({"a": "a\\xyz"}), true), (json!({"a": "ax"}), false)],
        );
        assert_matches(
            json!({"a": [{"wildcard": "\\**"}]}),
            &[(json!({"a": "*x"}), true), (json!({"a": "x"}), false)],
        );
    }

    // --- anything-but ---------------------------------------------------------------------------

    #[test]
    fn given_anything_but_string_when_value_differs_then_matches_even_other_types() {
        assert_matches(
            json!({"state": [{"anything-but": "initializing"}]}),
            &[
                (json!({"state": "running"}), true),
                (json!({"state": "initializing"}), false),
                (json!({"state": null}), true),
                (json!({"state": 5}), true),
                (json!({"state": false}), true),
                (json!({}), false),
                (json!({"state": {"x": 1}}), false),
                (json!({"state": []}), false),
            ],
        );
    }

    #[test]
    fn given_anything_but_list_when_event_array_has_one_unlisted_value_then_matches() {
        let p = json!({"state": [{"anything-but": ["stopped", "overloaded"]}]});
        assert_matches(
            p,
            &[
                (json!({"state": "running"}), true),
                (json!({"state": "stopped"}), false),
                (json!({"state": ["stopped", "overloaded"]}), false),
                (json!({"state": ["stopped", "running"]}), true),
            ],
        );
    }

    #[test]
    fn given_anything_but_numbers_when_value_equals_numerically_then_excluded() {
        assert_matches(
            json!({"x": [{"anything-but": [100, 200, 300]}]}),
            &[(json!({"x": 100.0}), false), (json!({"x": 150}), true), (json!({"x": "100"}), true)],
        );
        assert_matches(
            json!({"x": [{"anything-but": 123}]}),
            &[(json!({"x": 123}), false), (json!({"x": 124}), true)],
        );
    }

    #[test]
    fn given_anything_but_prefix_or_suffix_when_string_has_it_then_excluded() {
        assert_matches(
            json!({"state": [{"anything-but": {"prefix": "init"}}]}),
            &[
                (json!({"state": "initializing"}), false),
                (json!({"state": "running"}), true),
                (json!({"state": 7}), true),
                (json!({}), false),
            ],
        );
        assert_matches(
            json!({"f": [{"anything-but": {"suffix": ".png"}}]}),
            &[(json!({"f": "a.png"}), false), (json!({"f": "a.jpg"}), true)],
        );
    }

    #[test]
    fn given_anything_but_ignoring_case_when_value_differs_only_in_case_then_excluded() {
        assert_matches(
            json!({"s": [{"anything-but": {"equals-ignore-case": ["Stopped", "IDLE"]}}]}),
            &[
                (json!({"s": "STOPPED"}), false),
                (json!({"s": "idle"}), false),
                (json!({"s": "running"}), true),
            ],
        );
        assert_matches(
            json!({"s": [{"anything-but": {"equals-ignore-case": "x"}}]}),
            &[(json!({"s": "X"}), false), (json!({"s": "y"}), true)],
        );
    }

    #[test]
    fn given_anything_but_wildcard_when_string_fits_it_then_excluded() {
        assert_matches(
            json!({"p": [{"anything-but": {"wildcard": "*/lib/*"}}]}),
            &[(json!({"p": "/usr/lib/x"}), false), (json!({"p": "/usr/bin/x"}), true)],
        );
        assert_matches(
            json!({"p": [{"anything-but": {"wildcard": ["*/lib/*", "*.tmp"]}}]}),
            &[(json!({"p": "a.tmp"}), false), (json!({"p": "a.txt"}), true)],
        );
    }

    // --- numeric --------------------------------------------------------------------------------

    #[test]
    fn given_numeric_comparisons_when_values_sit_on_each_side_then_bounds_are_honoured() {
        let cases: [(Value, &[(f64, bool)]); 5] = [
            (json!(["=", 5]), &[(5.0, true), (5.000_001, false)]),
            (json!([">", 5]), &[(5.0, false), (5.1, true), (-6.0, false)]),
            (json!([">=", 5]), &[(5.0, true), (4.9, false)]),
            (json!(["<", 5]), &[(5.0, false), (-1e9, true)]),
            (json!(["<=", 5]), &[(5.0, true), (5.1, false)]),
        ];
        for (range, expectations) in cases {
            let events: Vec<(Value, bool)> =
                expectations.iter().map(|(x, m)| (json!({"n": x}), *m)).collect();
            assert_matches(json!({"n": [{"numeric": range}]}), &events);
        }
    }

    #[test]
    fn given_numeric_range_when_value_inside_or_on_edges_then_open_and_closed_ends_differ() {
        assert_matches(
            json!({"c": [{"numeric": [">", 0, "<=", 5]}]}),
            &[
                (json!({"c": 0}), false),
                (json!({"c": 0.0001}), true),
                (json!({"c": 5}), true),
                (json!({"c": 5.0001}), false),
            ],
        );
        assert_matches(
            json!({"c": [{"numeric": [">=", 0, "<", 5]}]}),
            &[(json!({"c": 0}), true), (json!({"c": 5}), false)],
        );
    }

    #[test]
    fn given_numeric_when_value_is_not_a_json_number_then_no_match() {
        assert_matches(
            json!({"n": [{"numeric": [">", 0]}]}),
            &[
                (json!({"n": "5"}), false),
                (json!({"n": true}), false),
                (json!({"n": null}), false),
                (json!({}), false),
            ],
        );
    }

    // --- exists ---------------------------------------------------------------------------------

    #[test]
    fn given_exists_true_when_field_holds_a_leaf_then_matches_even_null() {
        assert_matches(
            json!({"detail": {"c-count": [{"exists": true}]}}),
            &[
                (json!({"detail": {"c-count": 5}}), true),
                (json!({"detail": {"c-count": null}}), true),
                (json!({"detail": {"c-count": ""}}), true),
                (json!({"detail": {"c-count": [1]}}), true),
                (json!({"detail": {"c-count": []}}), false),
                (json!({"detail": {"c-count": {"c1": 100}}}), false),
                (json!({"detail": {}}), false),
                (json!({}), false),
            ],
        );
    }

    #[test]
    fn given_exists_false_when_field_is_absent_or_not_a_leaf_then_matches() {
        assert_matches(
            json!({"detail": {"c-count": [{"exists": false}]}}),
            &[
                (json!({"detail": {"state": "running"}}), true),
                (json!({"detail": {"c-count": {"c1": 100}}}), true),
                (json!({"detail": {"c-count": []}}), true),
                (json!({}), true),
                (json!({"detail": "x"}), true),
                (json!({"detail": {"c-count": null}}), false),
                (json!({"detail": {"c-count": 0}}), false),
            ],
        );
    }

    #[test]
    fn given_exists_false_or_a_value_when_matched_then_array_is_or() {
        assert_matches(
            json!({"a": [{"exists": false}, "x"]}),
            &[(json!({}), true), (json!({"a": "x"}), true), (json!({"a": "y"}), false)],
        );
    }

    #[test]
    fn given_exists_false_inside_array_of_objects_when_no_object_has_it_then_matches() {
        assert_matches(
            json!({"items": {"gift": [{"exists": false}]}}),
            &[
                (json!({"items": [{"sku": "A"}, {"sku": "B"}]}), true),
                (json!({"items": []}), true),
                (json!({"items": [1, 2]}), true),
                (json!({"items": [1, {"gift": true}]}), false),
            ],
        );
    }

    // --- cidr -----------------------------------------------------------------------------------

    #[test]
    fn given_cidr_when_address_is_inside_the_block_then_matches() {
        assert_matches(
            json!({"ip": [{"cidr": "10.0.0.0/24"}]}),
            &[
                (json!({"ip": "10.0.0.33"}), true),
                (json!({"ip": "10.0.1.1"}), false),
                (json!({"ip": "not an ip"}), false),
                (json!({"ip": "::1"}), false),
            ],
        );
        assert_matches(
            json!({"ip": [{"cidr": "2001:db8::/32"}]}),
            &[(json!({"ip": "2001:db8::1"}), true), (json!({"ip": "2001:db9::1"}), false)],
        );
        assert_matches(json!({"ip": [{"cidr": "10.1.2.3/8"}]}), &[(json!({"ip": "10.200.0.1"}), true)]);
        assert_matches(json!({"ip": [{"cidr": "0.0.0.0/0"}]}), &[(json!({"ip": "1.2.3.4"}), true)]);
    }

    // --- Well-formedness errors -----------------------------------------------------------------

    #[test]
    fn given_pattern_that_is_not_an_object_when_parsed_then_refused_at_root() {
        let error = refused(json!(["order.placed"]));
        assert_eq!(error.path, "");
        assert!(error.message.contains("must be a JSON object"), "{error}");
        assert!(error.message.contains("an array"), "{error}");
        assert_eq!(error.to_string(), error.message, "root errors display without a path");
    }

    #[test]
    fn given_empty_objects_when_parsed_then_refused_where_they_are() {
        assert_refused(json!({}), "", &["empty object"]);
        assert_refused(json!({"data": {}}), "data", &["empty object", "at least one field"]);
    }

    #[test]
    fn given_field_value_neither_array_nor_object_when_parsed_then_refused() {
        assert_refused(
            json!({"type": "order.placed"}),
            "type",
            &["expected an array", "the string \"order.placed\""],
        );
        assert_refused(json!({"data": {"total": 5}}), "data.total", &["the number 5"]);
        assert_refused(json!({"data": {"x": null}}), "data.x", &["got null"]);
    }

    #[test]
    fn given_empty_condition_array_when_parsed_then_refused() {
        assert_refused(json!({"data": {"tags": []}}), "data.tags", &["empty array", "at least one"]);
    }

    #[test]
    fn given_nested_array_condition_when_parsed_then_refused() {
        assert_refused(json!({"a": ["x", ["y"]]}), "a[1]", &["arrays do not nest"]);
    }

    #[test]
    fn given_unknown_operator_when_parsed_then_refused_with_a_suggestion() {
        let error = refused(json!({"data": {"id": [{"prefx": "a"}]}}));
        assert_eq!(error.path, "data.id[0].prefx");
        assert!(error.message.contains("unknown operator \"prefx\""), "{error}");
        assert!(error.message.contains("did you mean \"prefix\""), "{error}");
        assert!(error.message.contains("expected one of prefix, suffix"), "{error}");
        assert_eq!(error.to_string(), format!("data.id[0].prefx: {}", error.message));
        let far = refused(json!({"a": [{"between": [1, 2]}]}));
        assert!(!far.message.contains("did you mean"), "{far}");
    }

    #[test]
    fn given_operator_object_with_zero_or_two_keys_when_parsed_then_refused() {
        assert_refused(json!({"a": [{}]}), "a[0]", &["empty operator object"]);
        assert_refused(
            json!({"a": ["x", {"prefix": "a", "suffix": "b"}]}),
            "a[1]",
            &["exactly one operator", "found 2 (prefix, suffix)"],
        );
    }

    #[test]
    fn given_string_operator_with_wrong_operand_when_parsed_then_refused() {
        assert_refused(
            json!({"a": [{"prefix": 5}]}),
            "a[0].prefix",
            &["prefix takes a string", "the number 5"],
        );
        assert_refused(
            json!({"a": [{"suffix": ["x"]}]}),
            "a[0].suffix",
            &["suffix takes a string", "an array"],
        );
        assert_refused(
            json!({"a": [{"prefix": {"equals-ignore-case": 1}}]}),
            "a[0].prefix.equals-ignore-case",
            &["takes a string"],
        );
        assert_refused(
            json!({"a": [{"prefix": {"wildcard": "x"}}]}),
            "a[0].prefix",
            &["equals-ignore-case", "keys [wildcard]"],
        );
        assert_refused(
            json!({"a": [{"equals-ignore-case": ["x"]}]}),
            "a[0].equals-ignore-case",
            &["takes a string"],
        );
        assert_refused(json!({"a": [{"wildcard": 1}]}), "a[0].wildcard", &["takes a string"]);
        assert_refused(json!({"a": [{"cidr": 10}]}), "a[0].cidr", &["takes a string"]);
    }

    #[test]
    fn given_malformed_wildcards_when_parsed_then_refused() {
        assert_refused(
            json!({"a": [{"wildcard": "a**b"}]}),
            "a[0].wildcard",
            &["consecutive *", "character 3"],
        );
        assert_refused(json!({"a": [{"wildcard": "a\\nb"}]}), "a[0].wildcard", &["\\n", "not an escape"]);
        assert_refused(json!({"a": [{"wildcard": "ab\\"}]}), "a[0].wildcard", &["lone backslash"]);
    }

    #[test]
    fn given_malformed_numeric_when_parsed_then_refused_naming_the_element() {
        let numeric = |operand: Value| json!({"data": {"total": [{"numeric": operand}]}});
        let at = "data.total[0].numeric";
        assert_refused(numeric(json!(5)), at, &["array of comparisons", "the number 5"]);
        assert_refused(numeric(json!([">"])), at, &["got 1 element"]);
        assert_refused(numeric(json!([">", 1, "<"])), at, &["got 3 elements"]);
        assert_refused(numeric(json!([">", 1, "<", 5, "=", 3])), at, &["got 6 elements"]);
        assert_refused(
            numeric(json!(["!=", 1])),
            &format!("{at}[0]"),
            &["unknown numeric operator \"!=\"", "=, <, <=, >, >="],
        );
        assert_refused(numeric(json!([1, 1])), &format!("{at}[0]"), &["expected a comparison operator"]);
        assert_refused(
            numeric(json!([">", "5"])),
            &format!("{at}[1]"),
            &["expected a number", "the string \"5\""],
        );
        assert_refused(numeric(json!([">", 0, "<=", "5"])), &format!("{at}[3]"), &["expected a number"]);
        assert_refused(
            numeric(json!(["<", 10, ">", 0])),
            &format!("{at}[0]"),
            &["lower bound", "got \"<\" first"],
        );
        assert_refused(numeric(json!(["=", 1, "<", 5])), &format!("{at}[0]"), &["lower bound"]);
        assert_refused(numeric(json!([">", 0, ">=", 5])), &format!("{at}[2]"), &["upper bound"]);
        assert_refused(numeric(json!([">", 0, "<>", 5])), &format!("{at}[2]"), &["unknown numeric operator"]);
        assert_refused(
            numeric(json!([">", 10, "<", 5])),
            at,
            &["empty range", "lower bound 10", "upper bound 5"],
        );
        assert_refused(numeric(json!([">=", 5, "<=", 5])), at, &["empty range"]);
    }

    #[test]
    fn given_exists_with_non_boolean_when_parsed_then_refused() {
        assert_refused(
            json!({"a": [{"exists": "true"}]}),
            "a[0].exists",
            &["true or false", "the string \"true\""],
        );
    }

    #[test]
    fn given_malformed_anything_but_when_parsed_then_refused() {
        let at = "a[0].anything-but";
        let but = |operand: Value| json!({"a": [{"anything-but": operand}]});
        assert_refused(but(json!(null)), at, &["anything-but takes", "got null"]);
        assert_refused(but(json!(true)), at, &["got true"]);
        assert_refused(but(json!([])), at, &["at least one value"]);
        assert_refused(but(json!(["a", 1])), &format!("{at}[1]"), &["not a mix"]);
        assert_refused(
            but(json!([1, null])),
            &format!("{at}[1]"),
            &["only strings or only numbers", "got null"],
        );
        assert_refused(
            but(json!({"numeric": [">", 1]})),
            &format!("{at}.numeric"),
            &["\"numeric\" cannot be used inside anything-but"],
        );
        assert_refused(but(json!({"prefix": "a", "suffix": "b"})), at, &["keys [prefix, suffix]"]);
        assert_refused(but(json!({"prefix": ""})), &format!("{at}.prefix"), &["must not be empty"]);
        assert_refused(but(json!({"suffix": ["a"]})), &format!("{at}.suffix"), &["one non-empty string"]);
        assert_refused(
            but(json!({"equals-ignore-case": [1]})),
            &format!("{at}.equals-ignore-case[0]"),
            &["lists hold strings"],
        );
        assert_refused(
            but(json!({"equals-ignore-case": []})),
            &format!("{at}.equals-ignore-case"),
            &["non-empty list"],
        );
        assert_refused(
            but(json!({"wildcard": ["ok", "a**"]})),
            &format!("{at}.wildcard[1]"),
            &["consecutive *"],
        );
    }

    #[test]
    fn given_malformed_cidr_when_parsed_then_refused() {
        let at = "ip[0].cidr";
        assert_refused(json!({"ip": [{"cidr": "10.0.0.1"}]}), at, &["no /prefix-length"]);
        assert_refused(json!({"ip": [{"cidr": "10.0.0/8"}]}), at, &["not an IPv4 or IPv6 address"]);
        assert_refused(json!({"ip": [{"cidr": "10.0.0.0/33"}]}), at, &["from 0 to 32"]);
        assert_refused(json!({"ip": [{"cidr": "::/129"}]}), at, &["from 0 to 128"]);
    }

    #[test]
    fn given_malformed_or_when_parsed_then_refused() {
        assert_refused(json!({"$or": {"a": ["x"]}}), "$or", &["array of at least two", "an object"]);
        assert_refused(json!({"$or": [{"a": ["x"]}]}), "$or", &["at least two alternatives, got 1"]);
        assert_refused(json!({"$or": []}), "$or", &["got 0"]);
        assert_refused(
            json!({"data": {"$or": [{"a": ["x"]}, ["b"]]}}),
            "data.$or[1]",
            &["pattern object", "an array"],
        );
        assert_refused(json!({"$or": [{"a": ["x"]}, {}]}), "$or[1]", &["empty object"]);
        assert_refused(
            json!({"$or": [{"a": ["x"]}, {"b": [{"prefx": "y"}]}]}),
            "$or[1].b[0].prefx",
            &["unknown operator"],
        );
    }

    #[test]
    fn given_operator_name_used_as_field_inside_or_when_parsed_then_refused() {
        assert_refused(
            json!({"$or": [{"prefix": ["a"]}, {"b": ["c"]}]}),
            "$or[0].prefix",
            &["\"prefix\" is an operator"],
        );
        // Outside $or a field may carry an operator's name, as in EventBridge.
        assert_matches(json!({"prefix": ["+44"]}), &[(json!({"prefix": "+44"}), true)]);
    }

    #[test]
    fn given_numeric_written_without_its_array_when_parsed_then_refused_with_the_fix() {
        assert_refused(
            json!({"data": {"total": {"numeric": [">=", 1000]}}}),
            "data.total.numeric",
            &["numeric condition without its array", "[{\"numeric\""],
        );
        // A field called "numeric" holding ordinary values is still a field.
        assert_matches(json!({"numeric": ["yes"]}), &[(json!({"numeric": "yes"}), true)]);
    }

    #[test]
    fn given_odd_field_names_when_an_error_is_reported_then_path_quotes_them() {
        assert_refused(json!({"data": {"a.b": "x"}}), "data[\"a.b\"]", &["expected an array"]);
        assert_refused(json!({"detail-type": 1}), "detail-type", &["the number 1"]);
    }

    #[test]
    fn given_design_doc_example_when_parsed_then_matches_big_orders_only() {
        assert_matches(
            json!({"type": ["order.placed"], "data": {"total": [{"numeric": [">=", 1000]}]}}),
            &[
                (json!({"type": "order.placed", "subject": "o-1", "data": {"total": 1000}}), true),
                (json!({"type": "order.placed", "data": {"total": 999.99}}), false),
                (json!({"type": "order.placed", "data": {"total": "1000"}}), false),
                (json!({"type": "order.paid", "data": {"total": 5000}}), false),
            ],
        );
    }

    // --- Properties -----------------------------------------------------------------------------

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn scalar() -> impl Strategy<Value = Value> {
            prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::from),
                any::<i64>().prop_map(Value::from),
                (-1e12..1e12f64).prop_map(Value::from),
                "[a-cA-C0-9 *\\\\.-]{0,6}".prop_map(Value::from),
            ]
        }

        fn json_value() -> impl Strategy<Value = Value> {
            scalar().prop_recursive(3, 24, 4, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                    prop::collection::btree_map("[a-d]{1,2}", inner, 0..4)
                        .prop_map(|m| Value::Object(m.into_iter().collect())),
                ]
            })
        }

        fn event() -> impl Strategy<Value = Value> {
            prop::collection::btree_map("[a-d]{1,2}", json_value(), 1..5)
                .prop_map(|m| Value::Object(m.into_iter().collect()))
        }

        /// Every (object-key path, scalar) pair in the event; arrays are crossed transparently.
        fn leaves(value: &Value, path: &mut Vec<String>, out: &mut Vec<(Vec<String>, Value)>) {
            match value {
                Value::Object(map) => {
                    for (key, child) in map {
                        path.push(key.clone());
                        leaves(child, path, out);
                        path.pop();
                    }
                }
                Value::Array(items) => items.iter().for_each(|item| leaves(item, path, out)),
                scalar if !path.is_empty() => out.push((path.clone(), scalar.clone())),
                _ => {}
            }
        }

        /// `{"a": {"b": [condition]}}` for the path `a.b`.
        fn nest(path: &[String], condition: Value) -> Value {
            path.iter().rev().fold(json!([condition]), |inner, key| json!({ key: inner }))
        }

        fn escape_wildcard(s: &str) -> String {
            s.replace('\\', "\\\\").replace('*', "\\*")
        }

        /// JSON shaped like a pattern, right or wrong: field names that collide with operators and
        /// `$or`, operator objects with arbitrary operands, and numeric arrays of every length.
        fn pattern_like() -> impl Strategy<Value = Value> {
            let operator_name = prop::sample::select(vec![
                "prefix",
                "suffix",
                "equals-ignore-case",
                "wildcard",
                "anything-but",
                "numeric",
                "exists",
                "cidr",
                "prefx",
            ]);
            let numeric_element = prop_oneof![
                prop::sample::select(vec!["=", "<", "<=", ">", ">=", "!"]).prop_map(Value::from),
                (-10i64..10).prop_map(Value::from),
            ];
            let operand = prop_oneof![
                json_value(),
                prop::collection::vec(numeric_element, 0..6).prop_map(Value::Array),
                prop::sample::select(vec!["10.0.0.0/8", "::/0", "a*b", "a**", "\\x"]).prop_map(Value::from),
            ];
            let condition = prop_oneof![
                scalar(),
                (operator_name, operand).prop_map(|(name, operand)| json!({ name: operand })),
            ];
            let conditions = prop::collection::vec(condition, 0..3).prop_map(Value::Array);
            let key = prop::sample::select(vec!["a", "b", "$or", "numeric", "prefix"]);
            conditions.prop_recursive(3, 32, 3, move |inner| {
                prop_oneof![
                    prop::collection::btree_map(key.clone(), inner.clone(), 0..3).prop_map(|m| {
                        Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
                    }),
                    prop::collection::vec(inner, 0..3).prop_map(Value::Array),
                ]
            })
        }

        proptest! {
            #[test]
            fn an_exact_pattern_built_from_an_events_own_leaf_matches_it(event in event()) {
                let mut found = Vec::new();
                leaves(&event, &mut Vec::new(), &mut found);
                for (path, leaf) in found {
                    let p = nest(&path, leaf.clone());
                    let compiled = Pattern::parse(&p);
                    prop_assert!(compiled.is_ok(), "{p} refused: {compiled:?}");
                    if let Ok(compiled) = compiled {
                        prop_assert!(compiled.matches(&event), "{p} should match {event}");
                        let exists = Pattern::parse(&nest(&path, json!({"exists": true})));
                        prop_assert!(exists.is_ok_and(|e| e.matches(&event)));
                    }
                }
            }

            #[test]
            fn exactly_one_of_a_value_and_anything_but_it_matches_a_present_scalar(
                present in scalar(),
                excluded in prop_oneof![
                    any::<i64>().prop_map(Value::from),
                    (-1e6..1e6f64).prop_map(Value::from),
                    "[a-c]{0,3}".prop_map(Value::from),
                ],
                as_list in any::<bool>(),
            ) {
                let event = json!({"f": present});
                let but = if as_list { json!([excluded.clone()]) } else { excluded.clone() };
                let equal = pattern(json!({"f": [excluded]})).matches(&event);
                let other = pattern(json!({"f": [{"anything-but": but}]})).matches(&event);
                prop_assert!(equal != other, "equal={equal} anything-but={other} for {event}");
            }

            #[test]
            fn exists_true_and_exists_false_partition_every_event(value in json_value(), absent in any::<bool>()) {
                let event = if absent { json!({"g": value}) } else { json!({"f": value}) };
                let yes = pattern(json!({"f": [{"exists": true}]})).matches(&event);
                let no = pattern(json!({"f": [{"exists": false}]})).matches(&event);
                prop_assert!(yes != no, "{event}");
            }

            #[test]
            fn a_strings_own_prefix_suffix_and_escaped_wildcard_match_it(
                s in "[a-cA-C*\\\\ .-]{0,8}",
                cut in 0usize..9,
            ) {
                let cut = cut.min(s.len());
                let (head, tail) = s.split_at(cut);
                let event = json!({"f": s});
                for condition in [
                    json!({"prefix": head}),
                    json!({"suffix": tail}),
                    json!({"prefix": {"equals-ignore-case": head.to_uppercase()}}),
                    json!({"equals-ignore-case": s.to_lowercase()}),
                    json!({"wildcard": escape_wildcard(&s)}),
                    json!({"wildcard": format!("{}*", escape_wildcard(head))}),
                    json!({"wildcard": format!("*{}", escape_wildcard(tail))}),
                ] {
                    let p = json!({"f": [condition]});
                    prop_assert!(pattern(p.clone()).matches(&event), "{p} should match {event}");
                }
            }

            #[test]
            fn numeric_at_least_and_below_partition_numbers(x in -1e12..1e12f64, bound in -1e12..1e12f64) {
                let event = json!({"n": x});
                let at_least = pattern(json!({"n": [{"numeric": [">=", bound]}]})).matches(&event);
                let below = pattern(json!({"n": [{"numeric": ["<", bound]}]})).matches(&event);
                prop_assert!(at_least != below);
            }

            #[test]
            fn or_of_two_patterns_is_the_or_of_their_answers(
                event in event(),
                a in ("[a-d]{1,2}", scalar()),
                b in ("[a-d]{1,2}", scalar()),
            ) {
                let p = json!({ a.0.clone(): [a.1] });
                let q = json!({ b.0.clone(): [{"anything-but": "a"}] });
                let either = pattern(json!({"$or": [p.clone(), q.clone()]})).matches(&event);
                prop_assert_eq!(either, pattern(p).matches(&event) || pattern(q).matches(&event));
            }

            #[test]
            fn parsing_and_matching_arbitrary_json_never_panics(
                p in prop_oneof![json_value(), pattern_like()],
                e in json_value(),
            ) {
                match Pattern::parse(&p) {
                    Ok(compiled) => {
                        let _ = compiled.matches(&e);
                    }
                    Err(error) => prop_assert!(!error.message.is_empty()),
                }
            }
        }
    }
}
