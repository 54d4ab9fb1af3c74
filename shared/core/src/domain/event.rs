//! Domain events: the SQS message body that starts a workflow or supplies a step's inputs.
//!
//! A body arrives in one of two envelopes, and this module is the only place that knows both:
//!
//! - **CloudEvents 1.0, structured JSON mode**: `specversion` (must be `"1.0"`), `id`, `source`,
//!   `type`, and optionally `subject`, `time`, `datacontenttype`, `dataschema`, `data` or
//!   `data_base64`, plus extension attributes as top-level members.
//! - **EventBridge**, as a rule delivers an event to an SQS target: `version`, `id`,
//!   `detail-type`, `source`, `account`, `time`, `region`, `resources`, `detail`.
//!
//! Both become one [`Event`] in CloudEvents terms (`detail-type` is the `type`, `detail` is the
//! `data`), so that event patterns and key pointers are written once, against
//! [`Event::normalised`], whoever published the event.
//!
//! Rules this module keeps, and why:
//!
//! - **Detection is by one field.** `specversion` present means CloudEvents; otherwise
//!   `detail-type` present means EventBridge; otherwise the body is refused. `specversion` is
//!   checked first because it is REQUIRED in every CloudEvent, whereas `detail-type` (with its
//!   hyphen) cannot even be a CloudEvents attribute name.
//! - **`null` is unset in CloudEvents** (JSON format §2.2): a `null` attribute or extension is
//!   treated as absent, so `"subject": null` gives no subject, and a required attribute that is
//!   `null` is missing. Absent `data` and `"data": null` both give [`Value::Null`].
//! - **Nothing useful is dropped.** Extension attributes, `datacontenttype`, `dataschema` and
//!   EventBridge's `account`, `region` and `resources` (and any other top-level member) are kept
//!   in [`Event::extensions`] under their own names, and appear top-level in the normalised form,
//!   so a pattern on `account` matches as it would in EventBridge. Only the envelope markers
//!   (`specversion`, EventBridge `version`) are dropped, since they say nothing about the event.
//! - **`data_base64` is kept, not decoded**: it stays a string in `extensions`. baton's
//!   patterns and key pointers cannot look inside binary data, so decoding would buy nothing, and
//!   the crate carries no base64 dependency.
//! - **EventBridge leniency is narrow.** `version` may be absent (AWS's own example events omit
//!   it) but must be `"0"` when present. `time` and `detail` are required, because EventBridge
//!   always sets them, and `detail` must be an object. A top-level `type`, `subject` or `data`
//!   is refused: EventBridge never sends one, and keeping it would shadow the normalised field.
//! - **Every failure is permanent.** The same body always fails the same way, so a handler sends
//!   it to the dead-letter queue at once, tagged with [`EventError::reason_code`], instead of
//!   retrying it. Each message names the field and the rule it broke.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::domain::ids::{EventId, IdError};

/// The only CloudEvents `specversion` baton reads.
const CLOUDEVENTS_SPECVERSION: &str = "1.0";
/// The only EventBridge `version` there is.
const EVENTBRIDGE_VERSION: &str = "0";
/// Field names of the normalised form that an EventBridge body must not carry at top level.
const NORMALISED_ONLY: [&str; 3] = ["type", "subject", "data"];
/// Longest excerpt of a refused value quoted in an error; bodies can be large.
const EXCERPT_CHARS: usize = 64;

/// Which envelope carried an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Envelope {
    /// CloudEvents 1.0, structured JSON mode.
    CloudEvents,
    /// An EventBridge event, as a rule delivers it to an SQS target.
    EventBridge,
}

impl fmt::Display for Envelope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Envelope::CloudEvents => "CloudEvents",
            Envelope::EventBridge => "EventBridge",
        })
    }
}

/// A domain event in CloudEvents terms, whichever envelope carried it.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The event's id; with `source` it identifies the event, and a redelivery repeats it.
    pub id: EventId,
    /// The context the event happened in (CloudEvents `source`, EventBridge `source`).
    pub source: String,
    /// What happened (CloudEvents `type`, EventBridge `detail-type`).
    pub r#type: String,
    /// What the event is about within `source`; EventBridge events have none.
    pub subject: Option<String>,
    /// When it happened, as the producer stated it.
    pub time: Option<OffsetDateTime>,
    /// The payload (CloudEvents `data`, EventBridge `detail`); [`Value::Null`] when absent.
    pub data: Value,
    /// The envelope the event arrived in.
    pub envelope: Envelope,
    /// Every other attribute, in body order: CloudEvents extensions, `datacontenttype`,
    /// `dataschema` and `data_base64` (undecoded), or EventBridge `account`, `region`,
    /// `resources` and any other top-level member.
    pub extensions: Map<String, Value>,
}

impl Event {
    /// Parses an SQS message body holding a CloudEvent or an EventBridge event: `specversion`
    /// present means CloudEvents, else `detail-type` present means EventBridge.
    pub fn parse(body: &str) -> Result<Event, EventError> {
        let value: Value = serde_json::from_str(body).map_err(EventError::not_json)?;
        let fields = match value {
            Value::Object(fields) => fields,
            other => {
                return Err(EventError::NotAnObject { found: json_type(&other) });
            }
        };
        if fields.contains_key("specversion") {
            from_cloudevent(fields)
        } else if fields.contains_key("detail-type") {
            from_eventbridge(fields)
        } else {
            Err(EventError::UnknownEnvelope)
        }
    }

    /// The normalised JSON form that event patterns and key pointers address:
    /// `{"id", "source", "type", "subject"?, "time"?, "data", ...extensions}`.
    ///
    /// `time` is rendered as RFC 3339 with the producer's offset (`+00:00` renders as `Z`). An
    /// extension never overrides one of the fields before it; [`Event::parse`] cannot produce
    /// such a clash, but a hand-built `Event` could.
    pub fn normalised(&self) -> Value {
        let mut out = Map::with_capacity(6 + self.extensions.len());
        out.insert("id".into(), self.id.as_str().into());
        out.insert("source".into(), self.source.clone().into());
        out.insert("type".into(), self.r#type.clone().into());
        if let Some(subject) = &self.subject {
            out.insert("subject".into(), subject.clone().into());
        }
        // A time that RFC 3339 cannot express (an offset with seconds, a year past 9999) can
        // only come from a hand-built Event; it is left out rather than invented.
        if let Some(time) = self.time.and_then(|t| t.format(&Rfc3339).ok()) {
            out.insert("time".into(), time.into());
        }
        out.insert("data".into(), self.data.clone());
        for (name, value) in &self.extensions {
            out.entry(name.clone()).or_insert_with(|| value.clone());
        }
        Value::Object(out)
    }

    /// Resolves a JSON pointer (RFC 6901, e.g. `/subject` or `/data/order/id`) against
    /// [`Event::normalised`], as text: a string as it is, a number as JSON writes it (`1250`,
    /// `12.5`), a boolean as `true` or `false`. `None` when the pointer finds nothing, `null`, an
    /// object or an array, none of which can serve as a key.
    pub fn pointer_text(&self, pointer: &str) -> Option<String> {
        text_at(&self.normalised(), pointer)
    }
}

/// [`Event::pointer_text`] on an event already normalised, so that it is normalised once
/// however many pointers are read.
pub fn text_at(normalised: &Value, pointer: &str) -> Option<String> {
    match normalised.pointer(pointer)? {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}

/// Why a message body is not a usable domain event.
///
/// Every variant is permanent: the same body fails the same way every time.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    /// The body is not JSON, or is cut short.
    #[error("message body is not JSON: {problem} at line {line}, column {column}")]
    NotJson {
        /// What kind of JSON error: a syntax error, or the body ending early.
        problem: &'static str,
        line: usize,
        column: usize,
        #[source]
        source: serde_json::Error,
    },
    /// The body is JSON, but not an object.
    #[error("message body is {found}, not a JSON object{}", batch_hint(.found))]
    NotAnObject {
        /// The JSON type found, e.g. `an array`.
        found: &'static str,
    },
    /// The body is an object with neither `specversion` nor `detail-type`.
    #[error(
        "message body is neither a CloudEvent (it has no `specversion`) nor an EventBridge \
         event (it has no `detail-type`)"
    )]
    UnknownEnvelope,
    /// A required field is absent (or, in CloudEvents, `null`).
    #[error("missing required field `{field}` ({envelope} envelope)")]
    MissingField { envelope: Envelope, field: &'static str },
    /// A field has the wrong type, is empty, names an unsupported version, or is not allowed.
    #[error("invalid field `{field}` ({envelope} envelope): {problem}")]
    InvalidField { envelope: Envelope, field: &'static str, problem: FieldProblem },
    /// `time` is a string, but not an RFC 3339 timestamp.
    #[error(
        "invalid field `time` ({envelope} envelope): {value:?} is not an RFC 3339 timestamp \
         such as \"2018-04-05T17:31:00Z\""
    )]
    InvalidTime {
        envelope: Envelope,
        /// The refused value, cut to 64 characters.
        value: String,
        #[source]
        source: time::error::Parse,
    },
    /// `id` is a string, but not a usable [`EventId`].
    #[error("invalid field `id` ({envelope} envelope): {source}")]
    InvalidId {
        envelope: Envelope,
        #[source]
        source: IdError,
    },
    /// A CloudEvent carries both `data` and `data_base64`, which the JSON format forbids.
    #[error(
        "invalid field `data_base64` (CloudEvents envelope): present together with `data`; a \
         CloudEvent carries one or the other"
    )]
    DataAndDataBase64,
}

impl EventError {
    /// A stable snake_case code for the failure, used as the dead-letter reason attribute.
    ///
    /// Codes group failures by what the producer has to fix; several variants share
    /// `invalid_field`. Codes are a public contract: add new ones, never rename.
    /// Every code [`EventError::reason_code`] can return.
    pub const REASON_CODES: &[&str] = &[
        "not_json",
        "not_an_object",
        "unknown_envelope",
        "missing_field",
        "invalid_field",
        "conflicting_data",
    ];

    pub fn reason_code(&self) -> &'static str {
        match self {
            EventError::NotJson { .. } => "not_json",
            EventError::NotAnObject { .. } => "not_an_object",
            EventError::UnknownEnvelope => "unknown_envelope",
            EventError::MissingField { .. } => "missing_field",
            EventError::InvalidField { .. }
            | EventError::InvalidTime { .. }
            | EventError::InvalidId { .. } => "invalid_field",
            EventError::DataAndDataBase64 => "conflicting_data",
        }
    }

    /// The body field the failure is about, as the body spells it (`detail-type`, not `type`);
    /// `None` when the failure concerns the whole body.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            EventError::MissingField { field, .. } | EventError::InvalidField { field, .. } => Some(field),
            EventError::InvalidTime { .. } => Some("time"),
            EventError::InvalidId { .. } => Some("id"),
            EventError::DataAndDataBase64 => Some("data_base64"),
            EventError::NotJson { .. } | EventError::NotAnObject { .. } | EventError::UnknownEnvelope => None,
        }
    }

    fn not_json(source: serde_json::Error) -> EventError {
        let problem = match source.classify() {
            serde_json::error::Category::Eof => "the body ends early",
            _ => "syntax error",
        };
        EventError::NotJson { problem, line: source.line(), column: source.column(), source }
    }
}

/// What is wrong with a field's value, in [`EventError::InvalidField`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldProblem {
    /// The JSON type is wrong, e.g. a number where a string belongs.
    WrongType { expected: &'static str, found: &'static str },
    /// A string that must have content is empty.
    Empty,
    /// `specversion` or EventBridge `version` names a version baton does not read.
    UnsupportedVersion {
        /// The value found, cut to 64 characters.
        found: String,
        supported: &'static str,
    },
    /// A field of the normalised form (`type`, `subject`, `data`) at the top level of an
    /// EventBridge event, where it would shadow the normalised field.
    NotAnEventBridgeField,
}

impl fmt::Display for FieldProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldProblem::WrongType { expected, found } => {
                write!(f, "expected {expected}, found {found}")
            }
            FieldProblem::Empty => f.write_str("must not be empty"),
            FieldProblem::UnsupportedVersion { found, supported } => {
                write!(f, "{found:?} is not supported; only {supported:?} is")
            }
            FieldProblem::NotAnEventBridgeField => f.write_str(
                "EventBridge events carry no such top-level field, and it would shadow the \
                 normalised event's own",
            ),
        }
    }
}

fn from_cloudevent(mut fields: Map<String, Value>) -> Result<Event, EventError> {
    fields.retain(|_, value| !value.is_null());
    let mut body = Body { envelope: Envelope::CloudEvents, fields };

    let specversion = body.required_string("specversion")?;
    if specversion != CLOUDEVENTS_SPECVERSION {
        return Err(body.invalid(
            "specversion",
            FieldProblem::UnsupportedVersion {
                found: excerpt(&specversion),
                supported: CLOUDEVENTS_SPECVERSION,
            },
        ));
    }
    let id = body.id()?;
    let source = body.required_string("source")?;
    let r#type = body.required_string("type")?;
    let subject = body.optional_string("subject")?;
    let time = body.optional_string("time")?.map(|t| body.time(&t)).transpose()?;
    body.check_string("datacontenttype", false)?;
    body.check_string("dataschema", false)?;
    body.check_string("data_base64", true)?;
    if body.fields.contains_key("data") && body.fields.contains_key("data_base64") {
        return Err(EventError::DataAndDataBase64);
    }
    let data = body.fields.shift_remove("data").unwrap_or(Value::Null);

    Ok(Event {
        id,
        source,
        r#type,
        subject,
        time,
        data,
        envelope: Envelope::CloudEvents,
        extensions: body.fields,
    })
}

fn from_eventbridge(fields: Map<String, Value>) -> Result<Event, EventError> {
    let mut body = Body { envelope: Envelope::EventBridge, fields };

    if let Some(version) = body.optional_string("version")?
        && version != EVENTBRIDGE_VERSION
    {
        return Err(body.invalid(
            "version",
            FieldProblem::UnsupportedVersion { found: excerpt(&version), supported: EVENTBRIDGE_VERSION },
        ));
    }
    let id = body.id()?;
    let r#type = body.required_string("detail-type")?;
    let source = body.required_string("source")?;
    let time = body.required_string("time")?;
    let time = body.time(&time)?;
    let data = match body.fields.shift_remove("detail") {
        None => return Err(body.missing("detail")),
        Some(detail @ Value::Object(_)) => detail,
        Some(other) => return Err(body.wrong_type("detail", "an object", &other)),
    };
    body.check_string("account", true)?;
    body.check_string("region", true)?;
    if let Some(resources) = body.fields.get("resources") {
        let all_strings = resources.as_array().map(|items| items.iter().all(Value::is_string));
        match all_strings {
            Some(true) => {}
            Some(false) => {
                return Err(body.invalid(
                    "resources",
                    FieldProblem::WrongType {
                        expected: "an array of strings",
                        found: "an array with a non-string item",
                    },
                ));
            }
            None => return Err(body.wrong_type("resources", "an array of strings", resources)),
        }
    }
    if let Some(name) = NORMALISED_ONLY.into_iter().find(|n| body.fields.contains_key(*n)) {
        return Err(body.invalid(name, FieldProblem::NotAnEventBridgeField));
    }

    Ok(Event {
        id,
        source,
        r#type,
        subject: None,
        time: Some(time),
        data,
        envelope: Envelope::EventBridge,
        extensions: body.fields,
    })
}

/// A body's top-level members while they are read. Fields that become [`Event`] fields are
/// removed; what remains at the end is the extensions, still in body order.
struct Body {
    envelope: Envelope,
    fields: Map<String, Value>,
}

impl Body {
    fn required_string(&mut self, name: &'static str) -> Result<String, EventError> {
        match self.optional_string(name)? {
            Some(text) => Ok(text),
            None => Err(self.missing(name)),
        }
    }

    /// Removes a field that must be a non-empty string when present.
    fn optional_string(&mut self, name: &'static str) -> Result<Option<String>, EventError> {
        match self.fields.shift_remove(name) {
            None => Ok(None),
            Some(Value::String(text)) if text.is_empty() => Err(self.invalid(name, FieldProblem::Empty)),
            Some(Value::String(text)) => Ok(Some(text)),
            Some(other) => Err(self.wrong_type(name, "a string", &other)),
        }
    }

    /// Checks, without removing it, a field that is kept as an extension.
    fn check_string(&self, name: &'static str, may_be_empty: bool) -> Result<(), EventError> {
        match self.fields.get(name) {
            None => Ok(()),
            Some(Value::String(text)) if text.is_empty() && !may_be_empty => {
                Err(self.invalid(name, FieldProblem::Empty))
            }
            Some(Value::String(_)) => Ok(()),
            Some(other) => Err(self.wrong_type(name, "a string", other)),
        }
    }

    fn id(&mut self) -> Result<EventId, EventError> {
        let id = self.required_string("id")?;
        EventId::parse(id).map_err(|source| EventError::InvalidId { envelope: self.envelope, source })
    }

    fn time(&self, text: &str) -> Result<OffsetDateTime, EventError> {
        OffsetDateTime::parse(text, &Rfc3339).map_err(|source| EventError::InvalidTime {
            envelope: self.envelope,
            value: excerpt(text),
            source,
        })
    }

    fn missing(&self, field: &'static str) -> EventError {
        EventError::MissingField { envelope: self.envelope, field }
    }

    fn invalid(&self, field: &'static str, problem: FieldProblem) -> EventError {
        EventError::InvalidField { envelope: self.envelope, field, problem }
    }

    fn wrong_type(&self, field: &'static str, expected: &'static str, found: &Value) -> EventError {
        self.invalid(field, FieldProblem::WrongType { expected, found: json_type(found) })
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn batch_hint(found: &str) -> &'static str {
    if found == "an array" { "; batches of events are not accepted, send one event per message" } else { "" }
}

fn excerpt(text: &str) -> String {
    match text.char_indices().nth(EXCERPT_CHARS) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use proptest::prelude::*;
    use serde_json::json;
    use time::macros::datetime;

    use super::*;

    macro_rules! fixture {
        ($name:literal) => {
            include_str!(concat!("../../../../tests/fixtures/events/", $name))
        };
    }

    fn parse_ok(body: &str) -> Event {
        match Event::parse(body) {
            Ok(event) => event,
            Err(err) => panic!("expected a valid event, got: {err}"),
        }
    }

    fn parse_err(body: &str) -> EventError {
        match Event::parse(body) {
            Ok(event) => panic!("expected an error, got: {event:?}"),
            Err(err) => err,
        }
    }

    // ---- valid fixtures: the CloudEvents spec ----

    #[test]
    fn given_the_cloudevents_spec_example_when_parsed_then_attributes_and_extensions_are_kept() {
        let event = parse_ok(fixture!("cloudevents-spec-example.json"));

        assert_eq!(event.envelope, Envelope::CloudEvents);
        assert_eq!(event.time, Some(datetime!(2018-04-05 17:31:00 UTC)));
        assert_eq!(
            event.normalised(),
            json!({
                "id": "A234-1234-1234",
                "source": "https://github.com/cloudevents/spec/pull",
                "type": "com.github.pull_request.opened",
                "subject": "123",
                "time": "2018-04-05T17:31:00Z",
                "data": "<much wow=\"xml\"/>",
                "comexampleextension1": "value",
                "comexampleothervalue": 5,
                "datacontenttype": "text/xml",
            })
        );
    }

    #[test]
    fn given_the_json_format_example_with_json_data_when_parsed_then_null_subject_is_unset() {
        let event = parse_ok(fixture!("cloudevents-json-format-json-data.json"));

        assert_eq!(event.subject, None);
        assert_eq!(
            event.normalised(),
            json!({
                "id": "C234-1234-1234",
                "source": "/mycontext",
                "type": "com.example.someevent",
                "time": "2018-04-05T17:31:00Z",
                "data": { "appinfoA": "abc", "appinfoB": 123, "appinfoC": true },
                "comexampleextension1": "value",
                "comexampleothervalue": 5,
                "datacontenttype": "application/json",
            })
        );
    }

    #[test]
    fn given_the_json_format_example_with_xml_data_when_parsed_then_null_extension_is_dropped() {
        let event = parse_ok(fixture!("cloudevents-json-format-xml-data.json"));

        assert_eq!(event.data, json!("<much wow=\"xml\"/>"));
        assert!(!event.extensions.contains_key("unsetextension"));
        assert_eq!(
            event.normalised(),
            json!({
                "id": "B234-1234-1234",
                "source": "/mycontext",
                "type": "com.example.someevent",
                "time": "2018-04-05T17:31:00Z",
                "data": "<much wow=\"xml\"/>",
                "comexampleextension1": "value",
                "comexampleothervalue": 5,
                "datacontenttype": "application/xml",
            })
        );
    }

    #[test]
    fn given_the_json_format_example_with_binary_data_when_parsed_then_base64_is_kept_as_text() {
        let event = parse_ok(fixture!("cloudevents-json-format-binary-data.json"));

        assert_eq!(event.data, Value::Null);
        assert_eq!(
            event.normalised(),
            json!({
                "id": "A234-1234-1234",
                "source": "/mycontext",
                "type": "com.example.someevent",
                "time": "2018-04-05T17:31:00Z",
                "data": null,
                "comexampleextension1": "value",
                "comexampleothervalue": 5,
                "datacontenttype": "application/vnd.apache.thrift.binary",
                "data_base64": "... base64 encoded string ...",
            })
        );
    }

    // ---- valid fixtures: AWS documentation ----

    #[test]
    fn given_the_eventbridge_ec2_example_when_parsed_then_detail_type_and_detail_are_renamed() {
        let event = parse_ok(fixture!("eventbridge-ec2-state-change.json"));

        assert_eq!(event.envelope, Envelope::EventBridge);
        assert_eq!(event.subject, None);
        assert_eq!(
            event.normalised(),
            json!({
                "id": "6a7e8feb-b491-4cf7-a9f1-bf3703467718",
                "source": "aws.ec2",
                "type": "EC2 Instance State-change Notification",
                "time": "2017-12-22T18:43:48Z",
                "data": { "instance-id": "i-1234567890abcdef0", "state": "terminated" },
                "account": "111122223333",
                "region": "us-west-1",
                "resources": ["arn:aws:ec2:us-west-1:123456789012:instance/i-1234567890abcdef0"],
            })
        );
    }

    #[test]
    fn given_the_ec2_user_guide_example_without_version_when_parsed_then_it_is_accepted() {
        let event = parse_ok(fixture!("eventbridge-ec2-state-change-without-version.json"));

        assert_eq!(event.envelope, Envelope::EventBridge);
        assert_eq!(event.time, Some(datetime!(2021-11-11 21:29:54 UTC)));
        assert_eq!(event.pointer_text("/data/state").as_deref(), Some("pending"));
        assert_eq!(event.pointer_text("/account").as_deref(), Some("123456789012"));
    }

    // ---- valid fixtures: baton's own domain ----

    #[test]
    fn given_order_placed_as_a_cloudevent_when_normalised_then_subject_and_data_are_addressable() {
        let event = parse_ok(fixture!("order-placed.cloudevents.json"));

        assert_eq!(
            event.normalised(),
            json!({
                "id": "3f1c2a9e-7b64-4d2a-9c51-0e8b6f4d1001",
                "source": "com.example.shop",
                "type": "order.placed",
                "subject": "order-1001",
                "time": "2025-03-14T09:26:53Z",
                "data": { "order_id": "order-1001", "total": 1250, "currency": "EUR" },
                "datacontenttype": "application/json",
            })
        );
        assert_eq!(event.pointer_text("/subject").as_deref(), Some("order-1001"));
        assert_eq!(event.pointer_text("/data/total").as_deref(), Some("1250"));
    }

    #[test]
    fn given_order_placed_in_both_envelopes_when_normalised_then_the_shared_fields_agree() {
        let cloud = parse_ok(fixture!("order-placed.cloudevents.json")).normalised();
        let bridge_event = parse_ok(fixture!("order-placed.eventbridge.json"));
        let bridge = bridge_event.normalised();

        for field in ["id", "source", "type", "time", "data"] {
            assert_eq!(cloud[field], bridge[field], "{field}");
        }
        // EventBridge has no subject: a workflow fed by both keys on the data instead.
        assert_eq!(bridge_event.pointer_text("/subject"), None);
        assert_eq!(bridge_event.pointer_text("/data/order_id").as_deref(), Some("order-1001"));
        assert_eq!(bridge["region"], json!("eu-west-1"));
        assert_eq!(bridge["resources"], json!([]));
    }

    #[test]
    fn given_payment_settled_when_normalised_then_it_correlates_by_subject() {
        let event = parse_ok(fixture!("payment-settled.cloudevents.json"));

        assert_eq!(
            event.normalised(),
            json!({
                "id": "8d0e4b27-52f3-4c1a-b6e9-7a3d2c0f0077",
                "source": "com.example.payments",
                "type": "payment.settled",
                "subject": "order-1001",
                "time": "2025-03-14T10:02:11Z",
                "data": { "payment_ref": "pay-77" },
                "datacontenttype": "application/json",
            })
        );
        assert_eq!(event.pointer_text("/subject").as_deref(), Some("order-1001"));
        assert_eq!(event.pointer_text("/data/payment_ref").as_deref(), Some("pay-77"));
    }

    // ---- invalid fixtures ----

    #[test]
    fn given_a_truncated_body_when_parsed_then_not_json_says_where() {
        let err = parse_err(fixture!("invalid/not-json.txt"));

        let EventError::NotJson { line, column, .. } = &err else { panic!("{err:?}") };
        assert_eq!(*line, 2);
        assert_eq!(*column, 0);
        assert_eq!(err.reason_code(), "not_json");
        assert!(err.to_string().contains("ends early at line 2"), "{err}");
        assert!(err.source().is_some_and(|s| s.is::<serde_json::Error>()));
    }

    #[test]
    fn given_a_cloudevent_without_source_when_parsed_then_the_missing_field_is_named() {
        let err = parse_err(fixture!("invalid/missing-source.cloudevents.json"));

        assert!(matches!(err, EventError::MissingField { envelope: Envelope::CloudEvents, field: "source" }));
        assert_eq!(err.reason_code(), "missing_field");
        assert_eq!(err.field(), Some("source"));
        assert!(err.to_string().starts_with("missing required field `source`"), "{err}");
    }

    #[test]
    fn given_specversion_0_3_when_parsed_then_only_1_0_is_said_to_be_supported() {
        let err = parse_err(fixture!("invalid/specversion-0.3.cloudevents.json"));

        assert!(matches!(
            &err,
            EventError::InvalidField {
                field: "specversion",
                problem: FieldProblem::UnsupportedVersion { found, supported: "1.0" },
                ..
            } if found == "0.3"
        ));
        assert_eq!(err.reason_code(), "invalid_field");
        assert_eq!(
            err.to_string(),
            "invalid field `specversion` (CloudEvents envelope): \"0.3\" is not supported; \
             only \"1.0\" is"
        );
    }

    #[test]
    fn given_a_bare_payload_when_parsed_then_both_envelope_markers_are_named() {
        let err = parse_err(fixture!("invalid/no-envelope.json"));

        assert!(matches!(err, EventError::UnknownEnvelope));
        assert_eq!(err.reason_code(), "unknown_envelope");
        let message = err.to_string();
        assert!(message.contains("`specversion`") && message.contains("`detail-type`"), "{message}");
    }

    #[test]
    fn given_a_cloudevent_with_a_non_rfc3339_time_when_parsed_then_time_is_named() {
        let err = parse_err(fixture!("invalid/bad-time.cloudevents.json"));

        assert!(matches!(&err, EventError::InvalidTime { value, .. } if value == "14/03/2025 10:02"));
        assert_eq!(err.field(), Some("time"));
        assert_eq!(err.reason_code(), "invalid_field");
        assert!(err.to_string().starts_with("invalid field `time`"), "{err}");
        assert!(err.source().is_some_and(|s| s.is::<time::error::Parse>()));
    }

    #[test]
    fn given_an_eventbridge_event_dated_april_31_when_parsed_then_time_is_refused() {
        let err = parse_err(fixture!("invalid/bad-time.eventbridge.json"));

        assert!(matches!(
            &err,
            EventError::InvalidTime { envelope: Envelope::EventBridge, value, .. }
                if value == "2022-04-31T17:00:00Z"
        ));
    }

    #[test]
    fn given_a_cloudevent_with_data_and_data_base64_when_parsed_then_the_conflict_is_refused() {
        let err = parse_err(fixture!("invalid/data-and-data-base64.cloudevents.json"));

        assert!(matches!(err, EventError::DataAndDataBase64));
        assert_eq!(err.reason_code(), "conflicting_data");
        assert_eq!(err.field(), Some("data_base64"));
        assert!(err.to_string().starts_with("invalid field `data_base64`"), "{err}");
    }

    #[test]
    fn given_a_cloudevents_batch_when_parsed_then_not_an_object_suggests_one_per_message() {
        let err = parse_err(fixture!("invalid/array-body.json"));

        assert!(matches!(err, EventError::NotAnObject { found: "an array" }));
        assert_eq!(err.reason_code(), "not_an_object");
        assert!(err.to_string().contains("one event per message"), "{err}");
    }

    // ---- field rules, table-driven ----

    #[test]
    fn given_bodies_breaking_one_field_rule_when_parsed_then_the_field_and_code_are_reported() {
        let ce = |extra: Value| {
            let mut body = json!({"specversion": "1.0", "id": "e-1", "source": "/s", "type": "t"});
            if let (Value::Object(base), Value::Object(extra)) = (&mut body, extra) {
                base.extend(extra);
            }
            body.to_string()
        };
        let eb = |extra: Value| {
            let mut body = json!({
                "version": "0", "id": "e-1", "detail-type": "t", "source": "s",
                "time": "2025-01-01T00:00:00Z", "detail": {}
            });
            if let (Value::Object(base), Value::Object(extra)) = (&mut body, extra) {
                base.extend(extra);
            }
            body.to_string()
        };
        // (body, field, what the message says); every case is an `invalid_field`.
        #[rustfmt::skip]
        let cases = [
            (ce(json!({"id": 7})), "id", "expected a string, found a number"),
            (ce(json!({"id": ""})), "id", "must not be empty"),
            (ce(json!({"id": "a".repeat(257)})), "id", "limit is 256"),
            (ce(json!({"id": "a\u{7}b"})), "id", "event id"),
            (ce(json!({"source": ""})), "source", "must not be empty"),
            (ce(json!({"type": ["t"]})), "type", "found an array"),
            (ce(json!({"subject": ""})), "subject", "must not be empty"),
            (ce(json!({"time": 1700000000})), "time", "found a number"),
            (ce(json!({"specversion": 1.0})), "specversion", "a string"),
            (ce(json!({"dataschema": ""})), "dataschema", "must not be empty"),
            (ce(json!({"datacontenttype": {}})), "datacontenttype", "an object"),
            (ce(json!({"data_base64": 1})), "data_base64", "a number"),
            (eb(json!({"version": "1"})), "version", "only \"0\" is"),
            (eb(json!({"detail-type": ""})), "detail-type", "must not be empty"),
            (eb(json!({"detail-type": null})), "detail-type", "found null"),
            (eb(json!({"detail": "x"})), "detail", "expected an object"),
            (eb(json!({"account": 1})), "account", "a number"),
            (eb(json!({"resources": "arn"})), "resources", "found a string"),
            (eb(json!({"resources": [1]})), "resources", "non-string item"),
            (eb(json!({"subject": "o-1"})), "subject", "shadow"),
            (eb(json!({"data": {}})), "data", "shadow"),
            (eb(json!({"time": "yesterday"})), "time", "RFC 3339"),
        ];
        for (body, field, says) in cases {
            let err = parse_err(&body);
            assert_eq!(err.reason_code(), "invalid_field", "{body}: {err}");
            assert_eq!(err.field(), Some(field), "{body}: {err}");
            assert!(err.to_string().contains(says), "{body}: {err}");
        }

        // In CloudEvents a `null` attribute is unset, so a required one is missing.
        let err = parse_err(&ce(json!({"id": null})));
        assert_eq!(err.reason_code(), "missing_field");
        assert_eq!(err.field(), Some("id"));
    }

    #[test]
    fn given_an_eventbridge_event_missing_a_required_field_when_parsed_then_it_is_named() {
        for field in ["id", "source", "time", "detail"] {
            let mut body = json!({
                "id": "e-1", "detail-type": "t", "source": "s",
                "time": "2025-01-01T00:00:00Z", "detail": {}
            });
            if let Value::Object(fields) = &mut body {
                fields.remove(field);
            }
            let err = parse_err(&body.to_string());
            assert!(
                matches!(err, EventError::MissingField { envelope: Envelope::EventBridge, field: f } if f == field),
                "{field}: {err}"
            );
        }
    }

    #[test]
    fn given_an_invalid_id_when_parsed_then_the_id_error_is_the_source() {
        let err =
            parse_err(&json!({"specversion": "1.0", "id": "", "source": "/s", "type": "t"}).to_string());
        // An empty id is refused by the field rule before EventId sees it.
        assert!(matches!(err, EventError::InvalidField { field: "id", problem: FieldProblem::Empty, .. }));

        let long = "x".repeat(300);
        let err =
            parse_err(&json!({"specversion": "1.0", "id": long, "source": "/s", "type": "t"}).to_string());
        let source = err.source().and_then(|s| s.downcast_ref::<IdError>());
        assert!(matches!(source, Some(IdError::TooLong { len: 300, max: 256, .. })), "{err:?}");
    }

    #[test]
    fn given_a_huge_refused_value_when_reported_then_the_message_quotes_only_an_excerpt() {
        let huge = "9".repeat(10_000);
        let err =
            parse_err(&json!({"specversion": huge, "id": "e", "source": "/s", "type": "t"}).to_string());

        assert!(err.to_string().len() < 200, "{err}");
        assert!(err.to_string().contains("..."), "{err}");
    }

    #[test]
    fn given_scalar_and_empty_bodies_when_parsed_then_each_gets_its_reason() {
        assert_eq!(parse_err("").reason_code(), "not_json");
        assert_eq!(parse_err("   ").reason_code(), "not_json");
        assert_eq!(parse_err("{} trailing").reason_code(), "not_json");
        assert!(matches!(parse_err("\"hi\""), EventError::NotAnObject { found: "a string" }));
        assert!(matches!(parse_err("null"), EventError::NotAnObject { found: "null" }));
        assert!(matches!(parse_err("{}"), EventError::UnknownEnvelope));
    }

    // ---- detection and normalisation details ----

    #[test]
    fn given_both_specversion_and_detail_type_when_parsed_then_cloudevents_wins() {
        let body = json!({
            "specversion": "1.0", "id": "e", "source": "/s", "type": "t", "detail-type": "other"
        });
        let event = parse_ok(&body.to_string());

        assert_eq!(event.envelope, Envelope::CloudEvents);
        assert_eq!(event.r#type, "t");
        assert_eq!(event.extensions.get("detail-type"), Some(&json!("other")));
    }

    #[test]
    fn given_a_time_with_an_offset_when_normalised_then_the_offset_is_kept() {
        let body = json!({
            "specversion": "1.0", "id": "e", "source": "/s", "type": "t",
            "time": "2025-03-14T10:02:11.250+01:00"
        });
        let event = parse_ok(&body.to_string());

        assert_eq!(event.time, Some(datetime!(2025-03-14 09:02:11.25 UTC)));
        assert_eq!(event.pointer_text("/time").as_deref(), Some("2025-03-14T10:02:11.25+01:00"));
    }

    #[test]
    fn given_pointers_of_every_shape_when_resolved_then_only_scalars_give_text() {
        let body = json!({
            "specversion": "1.0", "id": "e-1", "source": "/s", "type": "t",
            "a/b": "slash", "flag": true,
            "data": {"n": 12.5, "big": 1250, "none": null, "list": [1, 2], "obj": {}, "s": ""}
        });
        let event = parse_ok(&body.to_string());

        assert_eq!(event.pointer_text("/id").as_deref(), Some("e-1"));
        assert_eq!(event.pointer_text("/data/n").as_deref(), Some("12.5"));
        assert_eq!(event.pointer_text("/data/big").as_deref(), Some("1250"));
        assert_eq!(event.pointer_text("/data/s").as_deref(), Some(""));
        assert_eq!(event.pointer_text("/data/list/1").as_deref(), Some("2"));
        assert_eq!(event.pointer_text("/a~1b").as_deref(), Some("slash"));
        assert_eq!(event.pointer_text("/flag").as_deref(), Some("true"));
        for none in ["/data/none", "/data/list", "/data/obj", "/data", "", "/subject", "/nope", "data"] {
            assert_eq!(event.pointer_text(none), None, "{none}");
        }
    }

    #[test]
    fn given_an_envelope_when_serialised_then_it_is_snake_case() {
        assert_eq!(serde_json::to_value(Envelope::CloudEvents).ok(), Some(json!("cloud_events")));
        assert_eq!(serde_json::to_value(Envelope::EventBridge).ok(), Some(json!("event_bridge")));
    }

    // ---- properties ----

    fn non_empty() -> impl Strategy<Value = String> {
        "(?s).{1,24}"
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            // Quarters are exact in binary and in short decimal, so they survive a JSON round trip.
            any::<i32>().prop_map(|n| Value::from(f64::from(n) / 4.0)),
            ".{0,12}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::vec((".{0,8}", inner), 0..4)
                    .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
            ]
        })
    }

    fn timestamp() -> impl Strategy<Value = OffsetDateTime> {
        // Years 1970 to about 9900, well inside what RFC 3339 can write at any offset.
        (0i64..250_000_000_000, -1439i32..=1439, 0u32..1_000_000_000).prop_filter_map(
            "a representable instant",
            |(secs, mins, nanos)| {
                let offset = time::UtcOffset::from_whole_seconds(mins * 60).ok()?;
                OffsetDateTime::from_unix_timestamp(secs)
                    .ok()?
                    .replace_nanosecond(nanos)
                    .ok()?
                    .checked_to_offset(offset)
            },
        )
    }

    /// Extension names that cannot collide with a CloudEvents attribute.
    fn extensions() -> impl Strategy<Value = Map<String, Value>> {
        let scalar = prop_oneof![
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            ".{0,12}".prop_map(Value::from),
        ];
        prop::collection::vec(("x[a-z0-9]{0,10}", scalar), 0..4).prop_map(|pairs| pairs.into_iter().collect())
    }

    proptest! {
        #[test]
        fn given_any_valid_cloudevent_when_parsed_then_its_fields_round_trip(
            id in "[^\\p{Cc}]{1,64}",
            source in non_empty(),
            r#type in non_empty(),
            subject in proptest::option::of(non_empty()),
            time in proptest::option::of(timestamp()),
            data in json_value(),
            extensions in extensions(),
        ) {
            let mut body = json!({"specversion": "1.0", "id": id, "source": source, "type": r#type});
            if let Value::Object(fields) = &mut body {
                if let Some(subject) = &subject {
                    fields.insert("subject".into(), subject.clone().into());
                }
                if let Some(text) = time.and_then(|t| t.format(&Rfc3339).ok()) {
                    fields.insert("time".into(), text.into());
                }
                fields.insert("data".into(), data.clone());
                fields.extend(extensions.clone());
            }

            let event = Event::parse(&body.to_string())
                .map_err(|e| TestCaseError::fail(format!("{body}: {e}")))?;

            prop_assert_eq!(event.id.as_str(), id.as_str());
            prop_assert_eq!(&event.source, &source);
            prop_assert_eq!(&event.r#type, &r#type);
            prop_assert_eq!(&event.subject, &subject);
            prop_assert_eq!(event.time, time);
            prop_assert_eq!(&event.data, &data);
            prop_assert_eq!(&event.extensions, &extensions);
            prop_assert_eq!(event.envelope, Envelope::CloudEvents);
        }

        #[test]
        fn given_any_valid_eventbridge_event_when_parsed_then_detail_type_and_detail_round_trip(
            id in "[^\\p{Cc}]{1,64}",
            source in non_empty(),
            detail_type in non_empty(),
            time in timestamp(),
            detail in prop::collection::vec((".{0,8}", json_value()), 0..4),
        ) {
            let detail = Value::Object(detail.into_iter().collect());
            let body = json!({
                "version": "0", "id": id, "detail-type": detail_type, "source": source,
                "account": "111122223333", "time": time.format(&Rfc3339).unwrap_or_default(),
                "region": "eu-west-1", "resources": [], "detail": detail,
            });

            let event = Event::parse(&body.to_string())
                .map_err(|e| TestCaseError::fail(format!("{body}: {e}")))?;

            prop_assert_eq!(event.id.as_str(), id.as_str());
            prop_assert_eq!(&event.source, &source);
            prop_assert_eq!(&event.r#type, &detail_type);
            prop_assert_eq!(event.time, Some(time));
            prop_assert_eq!(&event.data, &detail);
            prop_assert_eq!(event.envelope, Envelope::EventBridge);
        }

        #[test]
        fn given_any_parsed_event_when_its_normalised_form_is_sent_as_a_cloudevent_then_it_is_unchanged(
            id in "[^\\p{Cc}]{1,64}",
            source in non_empty(),
            detail_type in non_empty(),
            time in timestamp(),
            detail in prop::collection::vec((".{0,8}", json_value()), 0..4),
        ) {
            let body = json!({
                "id": id, "detail-type": detail_type, "source": source,
                "time": time.format(&Rfc3339).unwrap_or_default(),
                "detail": Value::Object(detail.into_iter().collect()), "account": "111122223333",
            });
            let first = Event::parse(&body.to_string())
                .map_err(|e| TestCaseError::fail(format!("{body}: {e}")))?;
            let mut again = first.normalised();
            if let Value::Object(fields) = &mut again {
                fields.insert("specversion".into(), "1.0".into());
            }

            let second = Event::parse(&again.to_string())
                .map_err(|e| TestCaseError::fail(format!("{again}: {e}")))?;

            prop_assert_eq!(second.normalised(), first.normalised());
        }

        #[test]
        fn given_any_string_when_parsed_then_it_never_panics(body in any::<String>()) {
            if let Err(err) = Event::parse(&body) {
                prop_assert!(!err.reason_code().is_empty());
            }
        }

        #[test]
        fn given_any_object_over_envelope_field_names_when_parsed_then_it_never_panics(
            fields in prop::collection::vec(
                (
                    prop::sample::select(vec![
                        "specversion", "version", "id", "source", "type", "detail-type", "subject",
                        "time", "data", "detail", "data_base64", "datacontenttype", "dataschema",
                        "account", "region", "resources", "comexampleextension1",
                    ]),
                    prop_oneof![
                        json_value(),
                        Just(json!("1.0")),
                        Just(json!("0")),
                        Just(json!("2018-04-05T17:31:00Z")),
                        Just(json!({})),
                    ],
                ),
                0..10,
            ),
        ) {
            let body: Map<String, Value> =
                fields.into_iter().map(|(name, value)| (name.to_owned(), value)).collect();
            let body = Value::Object(body).to_string();

            match Event::parse(&body) {
                Ok(event) => prop_assert!(!event.source.is_empty() && !event.r#type.is_empty()),
                Err(err) => prop_assert!(!err.to_string().is_empty(), "{}", err.reason_code()),
            }
        }
    }
}
