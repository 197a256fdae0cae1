//! The keys a configuration may set, read from the configuration types
//! themselves: serde is asked which fields each section has, so the
//! `WAFT_*` variables, the reference's test and the types cannot disagree.
//! A field added to a section is a key, with its variable, at once.
//!
//! The asking is done by [`Probe`], a deserializer that answers nothing: it
//! follows a path of field names into the type and reports what it finds
//! there, a section (a struct, with its field names) or a value (and whether
//! that value is a list, which the environment writes comma-separated).

use serde::de::{self, DeserializeOwned, IntoDeserializer, MapAccess, Visitor};

/// A key a configuration may set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Key {
    /// Field names from the top: `["queue", "sqs", "prefix"]`.
    pub path: Vec<&'static str>,
    /// The value is a list (`lambdas`, `allowed_hosts`).
    pub list: bool,
}

impl Key {
    /// `queue.sqs.prefix`, as the file and the reference write it.
    pub fn dotted(&self) -> String {
        self.path.join(".")
    }

    /// `WAFT_QUEUE_SQS_PREFIX`.
    pub fn env_name(&self) -> String {
        env_name(&self.dotted())
    }
}

/// The variable of a key: `queue.sqs.prefix` → `WAFT_QUEUE_SQS_PREFIX`.
pub(crate) fn env_name(dotted: &str) -> String {
    format!("WAFT_{}", dotted.replace('.', "_").to_ascii_uppercase())
}

/// Every key of `T`, sections walked in their fields' order.
pub(crate) fn keys<T: DeserializeOwned>() -> Vec<Key> {
    let mut keys = Vec::new();
    collect::<T>(&mut Vec::new(), &mut keys);
    keys
}

fn collect<T: DeserializeOwned>(path: &mut Vec<&'static str>, keys: &mut Vec<Key>) {
    match shape::<T>(path) {
        Shape::Section(fields) => {
            for field in fields {
                path.push(field);
                collect::<T>(path, keys);
                path.pop();
            }
        }
        Shape::Value { list } => keys.push(Key {
            path: path.clone(),
            list,
        }),
    }
}

/// What `T` holds at `path`.
fn shape<T: DeserializeOwned>(path: &[&'static str]) -> Shape {
    match T::deserialize(Probe { path }) {
        Err(Found::Shape(shape)) => shape,
        Err(Found::Other(reason)) => panic!("the configuration at {path:?}: {reason}"),
        Ok(_) => unreachable!("a probe gives no value"),
    }
}

#[derive(Debug, Clone, Copy)]
enum Shape {
    Section(&'static [&'static str]),
    Value { list: bool },
}

/// How a probe ends: with what it found, or with an error of the type's own.
#[derive(Debug)]
enum Found {
    Shape(Shape),
    Other(String),
}

impl std::fmt::Display for Found {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for Found {}

impl de::Error for Found {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Found::Other(msg.to_string())
    }
}

/// Follows `path` into a type: a struct on the way is given the next field
/// name alone; what is at the end of the path is reported.
struct Probe<'a> {
    path: &'a [&'static str],
}

impl<'de> de::Deserializer<'de> for Probe<'_> {
    type Error = Found;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Found> {
        Err(Found::Shape(Shape::Value { list: false }))
    }

    fn deserialize_seq<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Found> {
        Err(Found::Shape(Shape::Value { list: true }))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Found> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        visitor: V,
    ) -> Result<V::Value, Found> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Found> {
        match self.path.split_first() {
            None => Err(Found::Shape(Shape::Section(fields))),
            Some((field, rest)) => visitor.visit_map(OneField {
                field: Some(field),
                rest,
            }),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// A struct's map with one entry: the next field of the path, whose value
/// is probed further.
struct OneField<'a> {
    field: Option<&'static str>,
    rest: &'a [&'static str],
}

impl<'de> MapAccess<'de> for OneField<'_> {
    type Error = Found;

    fn next_key_seed<K: de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Found> {
        self.field
            .take()
            .map(|field| seed.deserialize(field.into_deserializer()))
            .transpose()
    }

    fn next_value_seed<V: de::DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Found> {
        seed.deserialize(Probe { path: self.rest })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    #[allow(dead_code, reason = "read by the probe only")]
    struct Outer {
        name: Option<String>,
        names: Vec<String>,
        inner: Inner,
    }

    #[derive(serde::Deserialize)]
    #[allow(dead_code, reason = "read by the probe only")]
    struct Inner {
        #[serde(deserialize_with = "waft_core::deserialize_duration")]
        wait: std::time::Duration,
        #[serde(skip)]
        filled_in: u32,
    }

    #[test]
    fn keys_are_read_from_the_types_sections_and_values() {
        let keys: Vec<(String, String, bool)> = keys::<Outer>()
            .into_iter()
            .map(|key| (key.dotted(), key.env_name(), key.list))
            .collect();
        assert_eq!(
            keys,
            [
                ("name".into(), "WAFT_NAME".into(), false),
                ("names".into(), "WAFT_NAMES".into(), true),
                ("inner.wait".into(), "WAFT_INNER_WAIT".into(), false),
            ]
        );
    }
}
