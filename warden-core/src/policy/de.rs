//! The typed policy, deserialised from the checked tree ([`super::yaml::Node`]).
//!
//! After [`super::schema::check`] passed, the only failures left are numbers that do
//! not fit their type (`timeout_s: 99999999999999999999`). Each error carries the
//! position and key path of the node it is about. Scalars read as serde_yaml 0.9 read
//! them: a plain scalar through the typed parses of [`super::yaml`]; one that does
//! not parse is refused with serde's own `invalid type: ..., expected ...` message.

use std::fmt;

use serde::de::{self, DeserializeSeed, Expected, Unexpected, Visitor};
use serde::forward_to_deserialize_any;

use super::yaml::{self, Int, Kind, Node, Position, Problem, Resolved};

/// A value that could not be deserialised, and where.
#[derive(Debug)]
pub(crate) struct Error {
    message: String,
    at: Option<(Position, String)>,
}

impl Error {
    /// Places an error at the node it came from, unless a deeper one did already.
    fn at(mut self, node: &Node, path: &str) -> Self {
        self.at.get_or_insert_with(|| (node.mark, path.to_owned()));
        self
    }
}

impl From<Error> for Problem {
    fn from(e: Error) -> Problem {
        let (mark, key) = match e.at {
            Some((mark, path)) => (Some(mark), (!path.is_empty()).then_some(path)),
            None => (None, None),
        };
        Problem {
            mark,
            key,
            message: e.message,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl de::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Error {
            message: msg.to_string(),
            at: None,
        }
    }
}

/// Deserialises `T` from `node`, the document's root.
pub(crate) fn from_node<'de, T: de::Deserialize<'de>>(node: &Node) -> Result<T, Error> {
    T::deserialize(NodeDe {
        node,
        path: String::new(),
    })
}

struct NodeDe<'n> {
    node: &'n Node,
    path: String,
}

/// A visitor that takes nothing: what a value that does not parse as the
/// expected type is shown to, for serde's "invalid type" message.
struct Refuse<'a>(&'a dyn Expected);

impl<'de> Visitor<'de> for Refuse<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Shows a plain scalar to `visitor` as what it reads as, with no type expected.
fn visit_plain<'de, V: Visitor<'de>>(value: &str, visitor: V) -> Result<V::Value, Error> {
    match yaml::resolve(value) {
        Resolved::Null => visitor.visit_unit(),
        Resolved::Bool(b) => visitor.visit_bool(b),
        Resolved::Int(Int::U64(n)) => visitor.visit_u64(n),
        Resolved::Int(Int::I64(n)) => visitor.visit_i64(n),
        Resolved::Int(Int::U128(n)) => visitor.visit_u128(n),
        Resolved::Int(Int::I128(n)) => visitor.visit_i128(n),
        Resolved::Float(f) => visitor.visit_f64(f),
        Resolved::Str => visitor.visit_str(value),
    }
}

impl NodeDe<'_> {
    /// serde's "invalid type: {what the node is}, expected {exp}".
    fn refuse(&self, exp: &dyn Expected) -> Error {
        let err = match &self.node.kind {
            Kind::Scalar { value, plain: true } => visit_plain(value, Refuse(exp))
                .err()
                .unwrap_or_else(|| de::Error::invalid_type(Unexpected::Str(value), exp)),
            Kind::Scalar { value, .. } => de::Error::invalid_type(Unexpected::Str(value), exp),
            Kind::Seq(_) => de::Error::invalid_type(Unexpected::Seq, exp),
            Kind::Map(_) => de::Error::invalid_type(Unexpected::Map, exp),
        };
        err.at(self.node, &self.path)
    }

    fn plain(&self) -> Option<&str> {
        match &self.node.kind {
            Kind::Scalar { value, plain: true } => Some(value),
            _ => None,
        }
    }

    fn locate<T>(&self, result: Result<T, Error>) -> Result<T, Error> {
        result.map_err(|e| e.at(self.node, &self.path))
    }

    /// The item `index` of this list.
    fn item<'c>(&self, node: &'c Node, index: usize) -> NodeDe<'c> {
        let path = format!("{}[{index}]", self.path);
        NodeDe { node, path }
    }

    /// The value (or key) `key` of this mapping.
    fn entry<'c>(&self, node: &'c Node, key: &Node) -> NodeDe<'c> {
        let name = match &key.kind {
            Kind::Scalar { value, .. } => value.as_str(),
            _ => "",
        };
        let path = if self.path.is_empty() {
            name.to_owned()
        } else {
            format!("{}.{name}", self.path)
        };
        NodeDe { node, path }
    }
}

impl<'de> de::Deserializer<'de> for NodeDe<'_> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let result = match &self.node.kind {
            Kind::Scalar { value, plain: true } => visit_plain(value, visitor),
            Kind::Scalar { value, .. } => visitor.visit_str(value),
            Kind::Seq(items) => visitor.visit_seq(Items {
                de: &self,
                items: items.iter().enumerate(),
            }),
            Kind::Map(entries) => visitor.visit_map(Entries {
                de: &self,
                entries: entries.iter(),
                value: None,
            }),
        };
        self.locate(result)
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.plain().and_then(yaml::parse_bool) {
            Some(b) => self.locate(visitor.visit_bool(b)),
            None => Err(self.refuse(&visitor)),
        }
    }

    fn deserialize_i64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.plain().and_then(yaml::parse_i64) {
            Some(n) => self.locate(visitor.visit_i64(n)),
            None => Err(self.refuse(&visitor)),
        }
    }

    fn deserialize_i8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_i64(visitor)
    }

    fn deserialize_i16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_i64(visitor)
    }

    fn deserialize_i32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_i64(visitor)
    }

    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.plain().and_then(yaml::parse_u64) {
            Some(n) => self.locate(visitor.visit_u64(n)),
            None => Err(self.refuse(&visitor)),
        }
    }

    fn deserialize_u8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_u64(visitor)
    }

    fn deserialize_u16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_u64(visitor)
    }

    fn deserialize_u32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_u64(visitor)
    }

    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.plain().and_then(yaml::parse_f64) {
            Some(f) => self.locate(visitor.visit_f64(f)),
            None => Err(self.refuse(&visitor)),
        }
    }

    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_f64(visitor)
    }

    /// Any scalar is a string, as written.
    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match &self.node.kind {
            Kind::Scalar { value, .. } => self.locate(visitor.visit_str(value)),
            _ => Err(self.refuse(&visitor)),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    /// A key is its text, whatever it would read as (`1:` is the key "1").
    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        if self.node.is_null() {
            self.locate(visitor.visit_none())
        } else {
            visitor.visit_some(self)
        }
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let items: &[Node] = match &self.node.kind {
            Kind::Seq(items) => items,
            _ if self.node.is_null() => &[],
            _ => return Err(self.refuse(&visitor)),
        };
        let result = visitor.visit_seq(Items {
            de: &self,
            items: items.iter().enumerate(),
        });
        self.locate(result)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let entries: &[(Node, Node)] = match &self.node.kind {
            Kind::Map(entries) => entries,
            _ if self.node.is_null() => &[],
            _ => return Err(self.refuse(&visitor)),
        };
        let result = visitor.visit_map(Entries {
            de: &self,
            entries: entries.iter(),
            value: None,
        });
        self.locate(result)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_map(visitor)
    }

    forward_to_deserialize_any! {
        i128 u128 char bytes byte_buf unit unit_struct newtype_struct tuple
        tuple_struct enum ignored_any
    }
}

struct Items<'a, 'n> {
    de: &'a NodeDe<'n>,
    items: std::iter::Enumerate<std::slice::Iter<'n, Node>>,
}

impl<'de> de::SeqAccess<'de> for Items<'_, '_> {
    type Error = Error;

    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, Error> {
        match self.items.next() {
            None => Ok(None),
            Some((i, item)) => seed.deserialize(self.de.item(item, i)).map(Some),
        }
    }
}

struct Entries<'a, 'n> {
    de: &'a NodeDe<'n>,
    entries: std::slice::Iter<'n, (Node, Node)>,
    value: Option<(&'n Node, &'n Node)>,
}

impl<'de> de::MapAccess<'de> for Entries<'_, '_> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let Some((key, value)) = self.entries.next() else {
            return Ok(None);
        };
        self.value = Some((key, value));
        seed.deserialize(self.de.entry(key, key)).map(Some)
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, Error> {
        let (key, value) = self
            .value
            .take()
            .ok_or_else(|| <Error as de::Error>::custom("a value without a key"))?;
        seed.deserialize(self.de.entry(value, key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct T {
        n: Option<i64>,
        f: Option<f64>,
        b: Option<bool>,
        s: Option<String>,
        l: Option<Vec<String>>,
        m: Option<Inner>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        k: Option<u32>,
    }

    fn de(text: &str) -> Result<T, String> {
        let root = yaml::parse(text).unwrap().unwrap();
        from_node::<T>(&root).map_err(|e| {
            let p = Problem::from(e);
            let m = p.mark.unwrap();
            format!(
                "{}:{}: {}: {}",
                m.line,
                m.column,
                p.key.unwrap_or_default(),
                p.message
            )
        })
    }

    #[test]
    fn values_read_as_the_core_schema_says() {
        assert_eq!(
            de("n: 0x1f\nf: 0123\nb: True\ns: 123\nl: [a, 'b', ~x]\nm: {k: 7}\n").unwrap(),
            T {
                n: Some(31),
                f: Some(123.0),
                b: Some(true),
                s: Some("123".into()),
                l: Some(vec!["a".into(), "b".into(), "~x".into()]),
                m: Some(Inner { k: Some(7) }),
            }
        );
        assert_eq!(
            de("n: ~\nf:\nm: null\n").unwrap(),
            T {
                n: None,
                f: None,
                b: None,
                s: None,
                l: None,
                m: None
            }
        );
    }

    #[test]
    fn numbers_that_do_not_fit_are_refused_where_they_are_with_serdes_words() {
        assert_eq!(
            de("s: x\nm: {k: 99999999999999999999}\n").unwrap_err(),
            "2:8: m.k: invalid type: integer `99999999999999999999` as u128, expected u32"
        );
        assert_eq!(
            de("n: 9223372036854775808\n").unwrap_err(),
            "1:4: n: invalid type: integer `9223372036854775808`, expected i64"
        );
        assert_eq!(
            de("m: {k: 5000000000}\n").unwrap_err(),
            "1:8: m.k: invalid value: integer `5000000000`, expected u32"
        );
        assert_eq!(
            de("f: 0x10\n").unwrap_err(),
            "1:4: f: invalid type: integer `16`, expected f64"
        );
        assert_eq!(
            de("l: [a, [b]]\n").unwrap_err(),
            "1:8: l[1]: invalid type: sequence, expected a string"
        );
        assert_eq!(
            de("x: 1\n").unwrap_err(),
            "1:1: x: unknown field `x`, expected one of `n`, `f`, `b`, `s`, `l`, `m`"
        );
    }
}
