//! A walk over one Avro body with its writer schema that accepts it only when it is exactly one record whose
//! every union branch and enum index names a member (avro_decode.rs runs it before arrow-avro, which reads a
//! nullable union's branch as "null or not" and so would take a damaged branch index for a value, where fastavro
//! refuses the record). It takes the shapes the caller decodes natively: records, arrays, enums, fixed, the
//! primitive types other than null, and unions of null and one other type; named types may be referred to by name.

use serde_json::Value;

#[derive(Debug, Clone)]
pub enum Shape {
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    Fixed(usize),
    Enum(i64),
    Array(Box<Shape>),
    /// a union of null (at `null_index`, 0 or 1) and one other type
    Nullable(i64, Box<Shape>),
    Record(Vec<Shape>),
    /// a named type defined earlier (an index into `Schema::named`)
    Named(usize),
}

/// A writer schema's shape and the named types it defines.
#[derive(Debug)]
pub struct Schema {
    root: Shape,
    named: Vec<Shape>,
}

impl Schema {
    pub fn parse(text: &str) -> Result<Schema, String> {
        let json: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        let mut names: Vec<(String, usize)> = Vec::new();
        let mut named = Vec::new();
        let root = shape(&json, None, &mut names, &mut named)?;
        if !matches!(root, Shape::Record(_)) {
            return Err("not a record".into());
        }
        Ok(Schema { root, named })
    }

    /// Whether `body` is exactly one record of this schema with every union branch and enum index in range.
    pub fn accepts(&self, body: &[u8]) -> bool {
        let mut pos = 0;
        self.walk(&self.root, body, &mut pos) && pos == body.len()
    }

    fn walk(&self, s: &Shape, b: &[u8], pos: &mut usize) -> bool {
        match s {
            Shape::Boolean => skip(b, pos, 1),
            Shape::Int | Shape::Long => varint(b, pos).is_some(),
            Shape::Float => skip(b, pos, 4),
            Shape::Double => skip(b, pos, 8),
            Shape::Bytes => match long(b, pos) {
                Some(n) if n >= 0 => skip(b, pos, n as usize),
                _ => false,
            },
            Shape::Fixed(n) => skip(b, pos, *n),
            Shape::Enum(n) => matches!(long(b, pos), Some(i) if (0..*n).contains(&i)),
            Shape::Nullable(null_index, inner) => match long(b, pos) {
                Some(i) if i == *null_index => true,
                Some(i) if i == 1 - *null_index => self.walk(inner, b, pos),
                _ => false,
            },
            Shape::Record(fields) => fields.iter().all(|f| self.walk(f, b, pos)),
            Shape::Named(i) => self.walk(&self.named[*i], b, pos),
            Shape::Array(item) => loop {
                let Some(mut count) = long(b, pos) else { return false };
                if count == 0 {
                    return true;
                }
                if count < 0 {
                    // a block with its size in bytes after the count
                    count = match count.checked_neg() {
                        Some(c) => c,
                        None => return false,
                    };
                    if long(b, pos).is_none() {
                        return false;
                    }
                }
                for _ in 0..count {
                    // every item takes at least one byte (no null type, no empty record), so a count past the
                    // body's end fails within the body's length
                    if *pos >= b.len() || !self.walk(item, b, pos) {
                        return false;
                    }
                }
            },
        }
    }
}

fn skip(b: &[u8], pos: &mut usize, n: usize) -> bool {
    match pos.checked_add(n) {
        Some(end) if end <= b.len() => {
            *pos = end;
            true
        }
        _ => false,
    }
}

/// An unsigned varint of at most 10 bytes (the 10th 0 or 1), as arrow-avro reads them.
fn varint(b: &[u8], pos: &mut usize) -> Option<u64> {
    let mut out = 0u64;
    for i in 0..10 {
        let byte = *b.get(*pos + i)?;
        if i == 9 && byte > 1 {
            return None;
        }
        out |= ((byte & 0x7f) as u64) << (7 * i);
        if byte < 0x80 {
            *pos += i + 1;
            return Some(out);
        }
    }
    None
}

/// A zigzag long.
fn long(b: &[u8], pos: &mut usize) -> Option<i64> {
    varint(b, pos).map(|v| (v >> 1) as i64 ^ -((v & 1) as i64))
}

fn full_name(obj: &serde_json::Map<String, Value>, space: Option<&str>) -> Result<String, String> {
    let name = obj.get("name").and_then(Value::as_str).ok_or("a named type without a name")?;
    let ns = obj.get("namespace").and_then(Value::as_str).or(space);
    Ok(match ns {
        Some(ns) if !ns.is_empty() && !name.contains('.') => format!("{ns}.{name}"),
        _ => name.to_string(),
    })
}

fn shape(
    v: &Value,
    space: Option<&str>,
    names: &mut Vec<(String, usize)>,
    named: &mut Vec<Shape>,
) -> Result<Shape, String> {
    match v {
        Value::String(t) => Ok(match t.as_str() {
            "boolean" => Shape::Boolean,
            "int" => Shape::Int,
            "long" => Shape::Long,
            "float" => Shape::Float,
            "double" => Shape::Double,
            "bytes" | "string" => Shape::Bytes,
            other => {
                let short = other.rsplit('.').next().unwrap_or(other);
                let full = match space {
                    Some(ns) if !ns.is_empty() && !other.contains('.') => format!("{ns}.{other}"),
                    _ => other.to_string(),
                };
                let found = names
                    .iter()
                    .find(|(n, _)| *n == full || *n == other)
                    .or_else(|| names.iter().find(|(n, _)| n.rsplit('.').next() == Some(short)));
                match found {
                    Some((_, i)) => Shape::Named(*i),
                    None => return Err(format!("type {other:?} not defined before its use")),
                }
            }
        }),
        Value::Array(members) => {
            let null = members.iter().position(|m| m.as_str() == Some("null"));
            match (members.len(), null) {
                (2, Some(i)) => Ok(Shape::Nullable(i as i64, Box::new(shape(&members[1 - i], space, names, named)?))),
                _ => Err("a union other than null and one type".into()),
            }
        }
        Value::Object(obj) => {
            let kind = obj.get("type").ok_or("a schema object without a type")?;
            match kind.as_str() {
                Some("record") | Some("error") | Some("enum") | Some("fixed") => {
                    let full = full_name(obj, space)?;
                    let inner_space = full.rsplit_once('.').map(|(ns, _)| ns.to_string());
                    let made = match kind.as_str() {
                        Some("enum") => {
                            let symbols = obj.get("symbols").and_then(Value::as_array).ok_or("an enum without symbols")?;
                            Shape::Enum(symbols.len() as i64)
                        }
                        Some("fixed") => {
                            let size = obj.get("size").and_then(Value::as_u64).ok_or("a fixed without a size")?;
                            Shape::Fixed(size as usize)
                        }
                        _ => {
                            let fields = obj.get("fields").and_then(Value::as_array).ok_or("a record without fields")?;
                            let mut out = Vec::with_capacity(fields.len());
                            for f in fields {
                                let t = f.get("type").ok_or("a field without a type")?;
                                out.push(shape(t, inner_space.as_deref(), names, named)?);
                            }
                            if out.is_empty() {
                                return Err("a record without fields".into());
                            }
                            Shape::Record(out)
                        }
                    };
                    named.push(made.clone());
                    names.push((full, named.len() - 1));
                    Ok(made)
                }
                Some("array") => {
                    let items = obj.get("items").ok_or("an array without items")?;
                    Ok(Shape::Array(Box::new(shape(items, space, names, named)?)))
                }
                Some("map") => Err("a map".into()),
                _ => shape(kind, space, names, named),
            }
        }
        _ => Err(format!("not an Avro schema: {v}")),
    }
}
