//! The records one `produce_arrow` call hands the producer, as Arrow arrays imported through the Arrow C data
//! interface (`__arrow_c_array__`, pyarrow's arrays and batches): checked once per call (types, lengths), then read
//! by index with no copy. Pure: no Kafka here.

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::{Array, ArrayRef, GenericBinaryArray, Int32Array, Int64Array, ListArray, StringArray};
use arrow_schema::{DataType, TimeUnit};

/// A binary column: Binary or LargeBinary (Utf8 and LargeUtf8 are read as their bytes).
pub enum Bytes {
    Small(GenericBinaryArray<i32>),
    Large(GenericBinaryArray<i64>),
}

impl Bytes {
    pub fn of(what: &str, a: ArrayRef) -> Result<Bytes, String> {
        let data = a.to_data();
        let as_binary = |t: DataType| data.clone().into_builder().data_type(t).build().map_err(|e| e.to_string());
        match a.data_type() {
            DataType::Binary => Ok(Bytes::Small(a.as_binary::<i32>().clone())),
            DataType::LargeBinary => Ok(Bytes::Large(a.as_binary::<i64>().clone())),
            DataType::Utf8 => Ok(Bytes::Small(GenericBinaryArray::<i32>::from(as_binary(DataType::Binary)?))),
            DataType::LargeUtf8 => Ok(Bytes::Large(GenericBinaryArray::<i64>::from(as_binary(DataType::LargeBinary)?))),
            t => Err(format!("{what} must be binary, large_binary, string or large_string; got {t}")),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Bytes::Small(a) => a.len(),
            Bytes::Large(a) => a.len(),
        }
    }

    #[inline]
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        match self {
            Bytes::Small(a) => a.is_valid(i).then(|| a.value(i)),
            Bytes::Large(a) => a.is_valid(i).then(|| a.value(i)),
        }
    }
}

/// Each record's target partition: one for all, or one per record.
pub enum Partitions {
    One(i32),
    Each(Int32Array),
}

impl Partitions {
    pub fn each(a: ArrayRef) -> Result<Partitions, String> {
        let p = match a.data_type() {
            DataType::Int32 => a.as_primitive::<Int32Type>().clone(),
            DataType::Int64 => {
                let wide = a.as_primitive::<Int64Type>();
                let mut out = Vec::with_capacity(wide.len());
                for v in wide.iter() {
                    let v = v.ok_or("partitions must not hold nulls")?;
                    out.push(i32::try_from(v).map_err(|_| format!("partition {v} is out of range"))?);
                }
                Int32Array::from(out)
            }
            t => return Err(format!("partitions must be an int or an int32/int64 array; got {t}")),
        };
        if p.null_count() > 0 {
            return Err("partitions must not hold nulls".into());
        }
        Ok(Partitions::Each(p))
    }

    #[inline]
    fn get(&self, i: usize) -> i32 {
        match self {
            Partitions::One(p) => *p,
            Partitions::Each(a) => a.value(i),
        }
    }
}

/// Each record's headers: a list of (key utf8, value binary) structs, null or empty for none.
pub struct Headers {
    list: ListArray,
    keys: StringArray,
    values: Bytes,
}

impl Headers {
    pub fn of(a: ArrayRef) -> Result<Headers, String> {
        let bad = |t: &DataType| format!("headers must be list<struct<key: string, value: binary>>; got {t}");
        let list = a.as_list_opt::<i32>().ok_or_else(|| bad(a.data_type()))?.clone();
        let pairs = list.values().as_struct_opt().ok_or_else(|| bad(a.data_type()))?;
        let (Some(k), Some(v)) = (pairs.column_by_name("key"), pairs.column_by_name("value")) else {
            return Err(bad(a.data_type()));
        };
        let keys = k.as_string_opt::<i32>().ok_or_else(|| bad(a.data_type()))?.clone();
        if keys.null_count() > 0 {
            return Err("a header's key must not be null".into());
        }
        let values = Bytes::of("a header's value", v.clone())?;
        Ok(Headers { list, keys, values })
    }

    /// The positions of record `i`'s headers in `keys`/`values`.
    #[inline]
    fn range(&self, i: usize) -> std::ops::Range<usize> {
        if self.list.is_null(i) {
            return 0..0;
        }
        let offs = self.list.value_offsets();
        offs[i] as usize..offs[i + 1] as usize
    }
}

/// Timestamps in milliseconds: an int64 column of epoch milliseconds or a timestamp column of any unit (floored to
/// milliseconds). Null, zero and negative ones are sent as 0, which Kafka's clients read as "now".
pub struct Stamps(Vec<i64>);

impl Stamps {
    pub fn of(a: ArrayRef) -> Result<Stamps, String> {
        let div = match a.data_type() {
            DataType::Int64 => 1,
            DataType::Timestamp(TimeUnit::Second, _) => -1000,
            DataType::Timestamp(TimeUnit::Millisecond, _) => 1,
            DataType::Timestamp(TimeUnit::Microsecond, _) => 1_000,
            DataType::Timestamp(TimeUnit::Nanosecond, _) => 1_000_000,
            t => return Err(format!("timestamps must be int64 (epoch milliseconds) or a timestamp; got {t}")),
        };
        let raw = Int64Array::from(a.to_data().into_builder().data_type(DataType::Int64).build().map_err(|e| e.to_string())?);
        let ms = raw
            .iter()
            .map(|v| {
                let v = v.unwrap_or(0);
                let ms = if div < 0 { v.saturating_mul(-div) } else { v.div_euclid(div) };
                ms.max(0)
            })
            .collect();
        Ok(Stamps(ms))
    }
}

/// Headers added to every record after its own: constant ones, then one holding the record's source offset as
/// decimal text (the restore's provenance headers).
pub struct Extra {
    pub constant: Vec<(String, Option<Vec<u8>>)>,
    pub offset: Option<(String, Int64Array)>,
}

/// One call's records, checked.
pub struct Rows {
    pub partitions: Partitions,
    pub keys: Bytes,
    pub values: Bytes,
    pub headers: Option<Headers>,
    pub stamps: Option<Stamps>,
    pub extra: Extra,
}

/// One record as the producer sends it.
pub struct Row<'a> {
    pub partition: i32,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub timestamp: i64,
}

impl Rows {
    pub fn check(&self) -> Result<usize, String> {
        let n = self.values.len();
        let mut lens = vec![("keys", self.keys.len())];
        if let Partitions::Each(p) = &self.partitions {
            lens.push(("partitions", p.len()));
        }
        if let Some(h) = &self.headers {
            lens.push(("headers", h.list.len()));
        }
        if let Some(s) = &self.stamps {
            lens.push(("timestamps", s.0.len()));
        }
        if let Some((_, o)) = &self.extra.offset {
            lens.push(("offsets", o.len()));
            if o.null_count() > 0 {
                return Err("offsets must not hold nulls".into());
            }
        }
        for (what, len) in lens {
            if len != n {
                return Err(format!("{what} has {len} entries and values {n}: every column must have one per record"));
            }
        }
        Ok(n)
    }

    #[inline]
    pub fn row(&self, i: usize) -> Row<'_> {
        Row {
            partition: self.partitions.get(i),
            key: self.keys.get(i),
            value: self.values.get(i),
            timestamp: self.stamps.as_ref().map_or(0, |s| s.0[i]),
        }
    }

    /// Record `i`'s headers, its own then the extra ones, as `add(key, value)` calls; how many.
    #[inline]
    pub fn headers_of(&self, i: usize, mut add: impl FnMut(&str, Option<&[u8]>)) -> usize {
        let mut count = 0;
        if let Some(h) = &self.headers {
            for j in h.range(i) {
                add(h.keys.value(j), h.values.get(j));
                count += 1;
            }
        }
        for (k, v) in &self.extra.constant {
            add(k.as_str(), v.as_deref());
            count += 1;
        }
        if let Some((k, offs)) = &self.extra.offset {
            add(k.as_str(), Some(offs.value(i).to_string().as_bytes()));
            count += 1;
        }
        count
    }

    /// Whether any record has a header (else no header list is made per record).
    pub fn any_headers(&self) -> bool {
        !self.extra.constant.is_empty()
            || self.extra.offset.is_some()
            || self.headers.as_ref().is_some_and(|h| h.keys.len() > 0)
    }
}
