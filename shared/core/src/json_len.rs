//! The length of a value's JSON text, as `serde_json::to_string` writes it, counted without
//! writing it.
//!
//! Every record write is measured against DynamoDB's 400 KB item limit, and the parts of a record
//! kept as JSON text (its waits with their inputs, a group's branches may hold 128 KiB) are
//! measured as text. Written out through serde_json to a counting writer, the text's strings were
//! escaped byte by byte only to be counted: a tenth of the simulation's time
//! (docs/PERFORMANCE.md). Here a string is counted 32 bytes at a time, and only a run that holds
//! a byte to escape is looked at byte by byte.
//!
//! What this counter does not cover (a float's digits, bytes, a map key that is neither a
//! string nor an integer, serde_json's own private types, a value whose `Serialize` fails) is
//! handed to serde_json: a float alone, the rest as the whole value, so the length (or the
//! error) is serde_json's own. The one difference left: a `Serialize` impl that ignores an
//! error its serializer gave it (and goes on) is counted without what failed, where serde_json
//! would have written it. baton has none; its impls are derived or write one string.

use serde::Serialize;
use serde::ser::{self, Impossible};

/// The length of `value`'s JSON text (compact, as `serde_json::to_string` writes it).
///
/// # Errors
///
/// serde_json's, where it would fail to write the value (a map key that is not a string, a
/// `Serialize` impl's own error).
pub fn json_len<T: Serialize + ?Sized>(value: &T) -> Result<usize, serde_json::Error> {
    let mut count = Counter(0);
    match value.serialize(&mut count) {
        Ok(()) => Ok(count.0),
        Err(Unusual) => written_len(value),
    }
}

/// The length of `value`'s JSON text, written out by serde_json to a writer that only counts.
fn written_len<T: Serialize + ?Sized>(value: &T) -> Result<usize, serde_json::Error> {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, value)?;
    Ok(count.0)
}

/// The length of `s` as a JSON string: its quotes, its bytes, and what escaping adds. serde_json
/// escapes `"` and `\` and the control characters below 0x20: the five with a short escape
/// (`\b`, `\t`, `\n`, `\f`, `\r`) take two bytes, the others six (`\u001f`); nothing else.
fn str_len(s: &str) -> usize {
    const fn added(byte: u8) -> usize {
        match byte {
            b'"' | b'\\' | 0x08 | 0x09 | 0x0a | 0x0c | 0x0d => 1,
            0..0x20 => 5,
            _ => 0,
        }
    }
    let bytes = s.as_bytes();
    let mut chunks = bytes.chunks_exact(32);
    let mut extra = 0;
    for chunk in &mut chunks {
        // No early exit: the compiler checks the 32 bytes at once.
        let any = chunk.iter().fold(false, |any, &b| any | (b < 0x20) | (b == b'"') | (b == b'\\'));
        if any {
            extra += chunk.iter().map(|&b| added(b)).sum::<usize>();
        }
    }
    extra += chunks.remainder().iter().map(|&b| added(b)).sum::<usize>();
    2 + bytes.len() + extra
}

fn digits(n: u128) -> usize {
    n.checked_ilog10().map_or(1, |log| log as usize + 1)
}

fn signed_len(n: i128) -> usize {
    usize::from(n < 0) + digits(n.unsigned_abs())
}

/// What the counter leaves to serde_json. Never escapes [`json_len`].
#[derive(Debug)]
struct Unusual;

impl std::fmt::Display for Unusual {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("left to serde_json")
    }
}

impl std::error::Error for Unusual {}

impl ser::Error for Unusual {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Unusual
    }
}

/// Counts as serde_json's compact serializer writes.
struct Counter(usize);

/// A sequence or map being counted: a comma before each element or entry but the first.
struct Compound<'a> {
    count: &'a mut Counter,
    at: At,
    /// Whether it is an enum variant's, closed by one more `}`.
    variant: bool,
}

/// Where a compound stands, as serde_json's own: told it holds nothing (a length of 0), it
/// writes its closing bracket at once, and then, should elements come all the same (an impl
/// that gave the wrong length), a comma before each and the bracket again at the end.
#[derive(PartialEq)]
enum At {
    Empty,
    First,
    Rest,
}

impl Compound<'_> {
    fn comma(&mut self) {
        if self.at != At::First {
            self.count.0 += 1;
        }
        self.at = At::Rest;
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unusual> {
        self.comma();
        value.serialize(&mut *self.count)
    }

    fn entry<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Result<(), Unusual> {
        self.comma();
        self.count.0 += str_len(key) + 1;
        value.serialize(&mut *self.count)
    }

    fn end(self) -> Result<(), Unusual> {
        self.count.0 += usize::from(self.at != At::Empty) + usize::from(self.variant);
        Ok(())
    }
}

impl Counter {
    fn add(&mut self, len: usize) -> Result<(), Unusual> {
        self.0 += len;
        Ok(())
    }

    /// `[` or `{` opened (after `{"<variant>":` for an enum variant's), told it holds `len`
    /// elements or entries.
    fn open(&mut self, variant: Option<&str>, len: Option<usize>) -> Compound<'_> {
        self.0 += variant.map_or(0, |v| 1 + str_len(v) + 1) + 1;
        let at = if len == Some(0) {
            self.0 += 1;
            At::Empty
        } else {
            At::First
        };
        Compound { count: self, at, variant: variant.is_some() }
    }
}

/// A serializer's methods for booleans and integers: each gives the length of its text to
/// `$put` (a map key's puts it in quotes).
macro_rules! numbers {
    ($put:ident) => {
        fn serialize_bool(self, v: bool) -> Result<(), Unusual> {
            self.$put(if v { 4 } else { 5 })
        }
        numbers!(@signed $put, serialize_i8: i8, serialize_i16: i16, serialize_i32: i32, serialize_i64: i64);
        numbers!(@unsigned $put, serialize_u8: u8, serialize_u16: u16, serialize_u32: u32, serialize_u64: u64);
        fn serialize_i128(self, v: i128) -> Result<(), Unusual> {
            self.$put(signed_len(v))
        }
        fn serialize_u128(self, v: u128) -> Result<(), Unusual> {
            self.$put(digits(v))
        }
    };
    (@signed $put:ident, $($method:ident: $t:ty),*) => {$(
        fn $method(self, v: $t) -> Result<(), Unusual> {
            self.$put(signed_len(v.into()))
        }
    )*};
    (@unsigned $put:ident, $($method:ident: $t:ty),*) => {$(
        fn $method(self, v: $t) -> Result<(), Unusual> {
            self.$put(digits(v.into()))
        }
    )*};
}

impl<'a> ser::Serializer for &'a mut Counter {
    type Ok = ();
    type Error = Unusual;
    type SerializeSeq = Compound<'a>;
    type SerializeTuple = Compound<'a>;
    type SerializeTupleStruct = Compound<'a>;
    type SerializeTupleVariant = Compound<'a>;
    type SerializeMap = Compound<'a>;
    type SerializeStruct = Compound<'a>;
    type SerializeStructVariant = Compound<'a>;

    numbers!(add);
    // A float's shortest digits are serde_json's to work out (`null` if not finite).
    fn serialize_f32(self, v: f32) -> Result<(), Unusual> {
        self.add(written_len(&v).map_err(|_| Unusual)?)
    }
    fn serialize_f64(self, v: f64) -> Result<(), Unusual> {
        self.add(written_len(&v).map_err(|_| Unusual)?)
    }
    fn serialize_char(self, v: char) -> Result<(), Unusual> {
        self.add(str_len(v.encode_utf8(&mut [0; 4])))
    }
    fn serialize_str(self, v: &str) -> Result<(), Unusual> {
        self.add(str_len(v))
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<(), Unusual> {
        Err(Unusual)
    }
    fn serialize_none(self) -> Result<(), Unusual> {
        self.add(4)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Unusual> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Unusual> {
        self.add(4)
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Unusual> {
        self.add(4)
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result<(), Unusual> {
        self.add(str_len(variant))
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<(), Unusual> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<(), Unusual> {
        self.0 += 1 + str_len(variant) + 1;
        value.serialize(&mut *self)?;
        self.add(1)
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Compound<'a>, Unusual> {
        Ok(self.open(None, len))
    }
    fn serialize_tuple(self, len: usize) -> Result<Compound<'a>, Unusual> {
        Ok(self.open(None, Some(len)))
    }
    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<Compound<'a>, Unusual> {
        Ok(self.open(None, Some(len)))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Compound<'a>, Unusual> {
        Ok(self.open(Some(variant), Some(len)))
    }
    fn serialize_map(self, len: Option<usize>) -> Result<Compound<'a>, Unusual> {
        Ok(self.open(None, len))
    }
    fn serialize_struct(self, name: &'static str, len: usize) -> Result<Compound<'a>, Unusual> {
        // serde_json's own numbers and raw values (behind features) come as structs so named.
        if name.starts_with("$serde_json::") {
            return Err(Unusual);
        }
        Ok(self.open(None, Some(len)))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Compound<'a>, Unusual> {
        Ok(self.open(Some(variant), Some(len)))
    }
}

/// The compound traits serde splits by shape, counted alike: their elements, or their fields
/// with their names.
macro_rules! compounds {
    ($($trait:ident: $method:ident),*; $($named:ident),*) => {
        $(impl ser::$trait for Compound<'_> {
            type Ok = ();
            type Error = Unusual;
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unusual> {
                self.element(value)
            }
            fn end(self) -> Result<(), Unusual> {
                Compound::end(self)
            }
        })*
        $(impl ser::$named for Compound<'_> {
            type Ok = ();
            type Error = Unusual;
            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                key: &'static str,
                value: &T,
            ) -> Result<(), Unusual> {
                self.entry(key, value)
            }
            fn end(self) -> Result<(), Unusual> {
                Compound::end(self)
            }
        })*
    };
}

compounds!(
    SerializeSeq: serialize_element,
    SerializeTuple: serialize_element,
    SerializeTupleStruct: serialize_field,
    SerializeTupleVariant: serialize_field;
    SerializeStruct,
    SerializeStructVariant
);

impl ser::SerializeMap for Compound<'_> {
    type Ok = ();
    type Error = Unusual;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Unusual> {
        self.comma();
        key.serialize(Key(&mut *self.count))
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Unusual> {
        self.count.0 += 1;
        value.serialize(&mut *self.count)
    }
    fn end(self) -> Result<(), Unusual> {
        Compound::end(self)
    }
}

/// A map key, as serde_json writes it: a string, or an integer or boolean in quotes. The keys it
/// refuses, and floats, are left to it.
struct Key<'a>(&'a mut Counter);

impl Key<'_> {
    fn quoted(self, len: usize) -> Result<(), Unusual> {
        self.0.add(2 + len)
    }
}

impl ser::Serializer for Key<'_> {
    type Ok = ();
    type Error = Unusual;
    type SerializeSeq = Impossible<(), Unusual>;
    type SerializeTuple = Impossible<(), Unusual>;
    type SerializeTupleStruct = Impossible<(), Unusual>;
    type SerializeTupleVariant = Impossible<(), Unusual>;
    type SerializeMap = Impossible<(), Unusual>;
    type SerializeStruct = Impossible<(), Unusual>;
    type SerializeStructVariant = Impossible<(), Unusual>;

    fn serialize_str(self, v: &str) -> Result<(), Unusual> {
        self.0.add(str_len(v))
    }
    fn serialize_char(self, v: char) -> Result<(), Unusual> {
        self.0.add(str_len(v.encode_utf8(&mut [0; 4])))
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result<(), Unusual> {
        self.0.add(str_len(variant))
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Result<(), Unusual> {
        value.serialize(self)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<(), Unusual> {
        value.serialize(self)
    }
    numbers!(quoted);
    fn serialize_f32(self, _: f32) -> Result<(), Unusual> {
        Err(Unusual)
    }
    fn serialize_f64(self, _: f64) -> Result<(), Unusual> {
        Err(Unusual)
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<(), Unusual> {
        Err(Unusual)
    }
    fn serialize_none(self) -> Result<(), Unusual> {
        Err(Unusual)
    }
    fn serialize_unit(self) -> Result<(), Unusual> {
        Err(Unusual)
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Unusual> {
        Err(Unusual)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<(), Unusual> {
        Err(Unusual)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, Unusual> {
        Err(Unusual)
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, Unusual> {
        Err(Unusual)
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, Unusual> {
        Err(Unusual)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Unusual> {
        Err(Unusual)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, Unusual> {
        Err(Unusual)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct, Unusual> {
        Err(Unusual)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Unusual> {
        Err(Unusual)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use serde_json::{Map, Value, json};

    use super::*;

    /// The length the counter alone gives, without serde_json's help.
    fn counted<T: Serialize + ?Sized>(value: &T) -> Option<usize> {
        let mut count = Counter(0);
        value.serialize(&mut count).ok().map(|()| count.0)
    }

    fn same_as_serde_json<T: Serialize + ?Sized>(value: &T) {
        let written = serde_json::to_string(value).map(|t| t.len()).map_err(|e| e.to_string());
        assert_eq!(json_len(value).map_err(|e| e.to_string()), written);
    }

    #[test]
    fn every_ascii_byte_and_some_beyond_count_as_written() {
        for byte in 0..=0x7f_u8 {
            let one = char::from(byte).to_string();
            same_as_serde_json(&one);
            // At each place in a run of 32 and past it.
            for at in [0, 5, 31, 32, 40] {
                let mut s = "x".repeat(45);
                s.replace_range(at..=at, &one);
                same_as_serde_json(&s);
            }
            same_as_serde_json(&char::from(byte));
        }
        for s in ["", "é", "日本語", "🦀", "\u{7f}\u{80}\u{2028}\u{feff}", &"\"\\\n".repeat(40)] {
            same_as_serde_json(s);
        }
    }

    #[test]
    fn numbers_at_their_edges_count_as_written() {
        for n in [0, 1, 9, 10, 99, 100, i64::MAX, i64::MIN, -1, -10] {
            same_as_serde_json(&n);
            same_as_serde_json(&json!({ n.to_string(): n }));
        }
        for n in [u64::MAX, 10_000_000_000_000_000_000] {
            same_as_serde_json(&n);
        }
        same_as_serde_json(&(i128::MIN, u128::MAX, 7_i8, -128_i8, 255_u8, u16::MAX, i32::MIN));
        for f in [0.0, -0.0, 1.5, 1e300, -2.5e-300, f64::NAN, f64::INFINITY, 0.1 + 0.2] {
            same_as_serde_json(&f);
        }
        same_as_serde_json(&(1.25_f32, f32::NAN));
    }

    /// Every shape serde gives a serializer, as derive writes them.
    #[derive(Serialize)]
    enum Shapes {
        Unit,
        Newtype(String),
        Tuple(u8, Option<String>),
        Struct { a: Vec<u8>, b: () },
    }

    #[derive(Serialize)]
    struct Unit;

    #[derive(Serialize)]
    struct Pair(i32, &'static str);

    #[derive(Serialize)]
    struct Wrapper(u64);

    #[derive(Serialize)]
    struct Nested {
        #[serde(skip_serializing_if = "Option::is_none")]
        skipped: Option<u8>,
        #[serde(rename = "r\"enamed")]
        renamed: bool,
        #[serde(flatten)]
        flat: BTreeMap<String, Value>,
        shapes: Vec<Shapes>,
        unit: Unit,
        pair: Pair,
        wrapper: Wrapper,
        empty: Vec<u8>,
        empty_map: BTreeMap<u8, u8>,
        tuple: (char, char),
    }

    #[test]
    fn every_shape_counts_as_written() {
        let nested = Nested {
            skipped: None,
            renamed: true,
            flat: BTreeMap::from([("f\tlat".into(), json!([1, "two", null]))]),
            shapes: vec![
                Shapes::Unit,
                Shapes::Newtype("new\u{1}type".into()),
                Shapes::Tuple(3, None),
                Shapes::Struct { a: vec![1, 2], b: () },
            ],
            unit: Unit,
            pair: Pair(-4, "pair"),
            wrapper: Wrapper(77),
            empty: vec![],
            empty_map: BTreeMap::new(),
            tuple: ('"', '\u{0}'),
        };
        same_as_serde_json(&nested);
        assert_eq!(counted(&nested), Some(serde_json::to_string(&nested).unwrap().len()), "counted alone");
        // Map keys serde_json puts in quotes.
        same_as_serde_json(&BTreeMap::from([(true, 1), (false, 2)]));
        same_as_serde_json(&BTreeMap::from([(-5_i64, 'x'), (12, 'y')]));
        same_as_serde_json(&BTreeMap::from([('k', 1)]));
        same_as_serde_json(&Pairs(vec![(Wrapper(3), 1)]));
        same_as_serde_json(&BTreeMap::from([(Some("k"), 1)]));
        same_as_serde_json(&Pairs(vec![(Shapes::Unit, 1)]));
        same_as_serde_json(&Pairs(vec![(Shapes::Newtype("n".into()), 1)]));
    }

    /// An impl that says it holds nothing and then gives elements: serde_json closes the
    /// bracket at once and writes what comes after it (`[],1,2]`); counted the same.
    #[test]
    fn a_misstated_empty_length_counts_as_serde_json_writes_it() {
        struct Misstated(u8);
        impl Serialize for Misstated {
            fn serialize<S: ser::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use ser::{
                    SerializeMap, SerializeSeq, SerializeStruct, SerializeStructVariant,
                    SerializeTupleVariant,
                };
                match self.0 {
                    0 => {
                        let mut seq = s.serialize_seq(Some(0))?;
                        seq.serialize_element(&1)?;
                        seq.serialize_element(&2)?;
                        seq.end()
                    }
                    1 => {
                        let mut map = s.serialize_map(Some(0))?;
                        map.serialize_entry("a", &1)?;
                        map.end()
                    }
                    2 => {
                        let mut st = s.serialize_struct("S", 0)?;
                        st.serialize_field("a", &1)?;
                        st.end()
                    }
                    3 => {
                        let mut tv = s.serialize_tuple_variant("E", 0, "V", 0)?;
                        tv.serialize_field(&1)?;
                        tv.end()
                    }
                    4 => {
                        let mut sv = s.serialize_struct_variant("E", 0, "V", 0)?;
                        sv.serialize_field("a", &1)?;
                        sv.end()
                    }
                    _ => s.serialize_struct_variant("E", 0, "V", 0)?.end(),
                }
            }
        }
        for shape in 0..6 {
            same_as_serde_json(&Misstated(shape));
        }
    }

    #[test]
    fn what_it_leaves_to_serde_json_counts_or_fails_as_serde_json_does() {
        // Bytes: an array of numbers.
        assert_eq!(counted(&Bytes(vec![0, 10, 255])), None);
        assert_eq!(counted(&Pairs(vec![(1.5, 1)])), None);
        same_as_serde_json(&Bytes(vec![0, 10, 255]));
        same_as_serde_json(&Bytes(vec![]));
        // A float key in quotes; keys serde_json refuses, refused the same.
        same_as_serde_json(&Pairs(vec![(1.5, 1), (-0.25, 2)]));
        same_as_serde_json(&Pairs(vec![(f64::NAN, 1)]));
        let refused = BTreeMap::from([(vec![1_u8], 1)]);
        assert!(json_len(&refused).is_err());
        same_as_serde_json(&refused);
        same_as_serde_json(&BTreeMap::from([((), 1)]));
        same_as_serde_json(&BTreeMap::from([(None::<u8>, 1)]));
        // A Serialize impl that fails.
        struct Fails;
        impl Serialize for Fails {
            fn serialize<S: ser::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
                Err(ser::Error::custom("no"))
            }
        }
        assert!(json_len(&vec![Fails]).is_err());
        same_as_serde_json(&vec![Fails]);
    }

    struct Bytes(Vec<u8>);

    impl Serialize for Bytes {
        fn serialize<S: ser::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_bytes(&self.0)
        }
    }

    /// A map of any keys, floats and enums among them.
    struct Pairs<K, V>(Vec<(K, V)>);

    impl<K: Serialize, V: Serialize> Serialize for Pairs<K, V> {
        fn serialize<S: ser::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.collect_map(self.0.iter().map(|(k, v)| (k, v)))
        }
    }

    fn value() -> impl Strategy<Value = Value> {
        let text = prop_oneof![
            any::<String>(),
            "[ -~]{0,70}",
            proptest::collection::vec(
                prop_oneof![Just('"'), Just('\\'), Just('\n'), Just('\u{1}'), Just('a'), Just('é')],
                0..70
            )
            .prop_map(|cs| cs.into_iter().collect()),
        ];
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            text.clone().prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 8, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                proptest::collection::vec((text.clone(), inner), 0..8)
                    .prop_map(|entries| Value::Object(entries.into_iter().collect::<Map<_, _>>())),
            ]
        })
    }

    proptest! {
        #[test]
        fn any_json_value_counts_as_written(v in value()) {
            let written = serde_json::to_string(&v).unwrap().len();
            prop_assert_eq!(json_len(&v).unwrap(), written);
            // Floats aside, no part of a JSON value is left to serde_json.
            prop_assert_eq!(counted(&v), Some(written));
        }
    }
}
