//! The archived envelope of a run of records, built column by column: the same schema, bytes and nulls as
//! `executor/kafka_read.py::ENVELOPE_SCHEMA` (what Spark's Kafka source hands a Python task).

use std::sync::Arc;

use arrow_array::builder::{BinaryBuilder, Int32Builder, Int64Builder, StringBuilder};
use arrow_array::{ArrayRef, ListArray, RecordBatch, StringArray, StructArray, TimestampMicrosecondArray};
use arrow_buffer::{BooleanBufferBuilder, NullBuffer, OffsetBuffer};
use arrow_schema::{ArrowError, DataType, Field, Fields, Schema, TimeUnit};
use std::ffi::CStr;

use rdkafka::bindings as rd;
use rdkafka::message::{BorrowedMessage, Message, Timestamp};
use rdkafka::error::IsError;

fn header_fields() -> Fields {
    Fields::from(vec![Field::new("key", DataType::Utf8, true), Field::new("value", DataType::Binary, true)])
}

fn header_item() -> Arc<Field> {
    Arc::new(Field::new("element", DataType::Struct(header_fields()), true))
}

pub fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("key", DataType::Binary, true),
        Field::new("value", DataType::Binary, true),
        Field::new("headers", DataType::List(header_item()), true),
        Field::new("topic", DataType::Utf8, true),
        Field::new("partition", DataType::Int32, true),
        Field::new("offset", DataType::Int64, true),
        Field::new("timestamp", DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), true),
        Field::new("timestamp_type", DataType::Int32, true),
    ]))
}

/// Records appended in offset order; `finish` makes them one envelope batch and starts over.
pub struct EnvelopeBuilder {
    keys: BinaryBuilder,
    values: BinaryBuilder,
    header_offsets: Vec<i32>,
    header_valid: BooleanBufferBuilder,
    header_keys: StringBuilder,
    header_values: BinaryBuilder,
    offsets: Int64Builder,
    stamps: Vec<i64>,
    stamp_types: Int32Builder,
    pub records: usize,
    pub value_bytes: usize,
}

impl EnvelopeBuilder {
    pub fn new() -> Self {
        EnvelopeBuilder {
            keys: BinaryBuilder::new(),
            values: BinaryBuilder::new(),
            header_offsets: vec![0],
            header_valid: BooleanBufferBuilder::new(0),
            header_keys: StringBuilder::new(),
            header_values: BinaryBuilder::new(),
            offsets: Int64Builder::new(),
            stamps: Vec::new(),
            stamp_types: Int32Builder::new(),
            records: 0,
            value_bytes: 0,
        }
    }

    /// One record: its key and value (null when absent), its headers (null when it has none), its offset, its
    /// timestamp in microseconds and Kafka's timestamp type id (0 CreateTime, 1 LogAppendTime, -1 none).
    pub fn append(&mut self, m: &BorrowedMessage<'_>) {
        self.keys.append_option(m.key());
        let value = m.payload();
        self.value_bytes += value.map_or(0, <[u8]>::len);
        self.values.append_option(value);
        let count = self.append_headers(m);
        let last = *self.header_offsets.last().unwrap_or(&0);
        self.header_offsets.push(last + count as i32);
        self.header_valid.append(count > 0);
        self.offsets.append_value(m.offset());
        let (ts, kind) = match m.timestamp() {
            Timestamp::NotAvailable => (-1, -1),
            Timestamp::CreateTime(t) => (t, 0),
            Timestamp::LogAppendTime(t) => (t, 1),
        };
        self.stamps.push(ts * 1000);
        self.stamp_types.append_value(kind);
        self.records += 1;
    }

    /// The record's headers, read straight from librdkafka: a key that is not UTF-8 is read lossily (as Java's
    /// clients and Spark's source read it), never a panic.
    fn append_headers(&mut self, m: &BorrowedMessage<'_>) -> usize {
        let mut hdrs: *mut rd::rd_kafka_headers_t = std::ptr::null_mut();
        // SAFETY: the message outlives this call; librdkafka owns the headers and the pointers it hands out.
        unsafe {
            if rd::rd_kafka_message_headers(m.ptr(), &mut hdrs).is_error() || hdrs.is_null() {
                return 0;
            }
            let count = rd::rd_kafka_header_cnt(hdrs);
            for idx in 0..count {
                let (mut name, mut value, mut size) = (std::ptr::null(), std::ptr::null(), 0usize);
                if rd::rd_kafka_header_get_all(hdrs, idx, &mut name, &mut value, &mut size).is_error() {
                    return idx;
                }
                self.header_keys.append_value(String::from_utf8_lossy(CStr::from_ptr(name).to_bytes()));
                if value.is_null() {
                    self.header_values.append_null();
                } else {
                    self.header_values.append_value(std::slice::from_raw_parts(value as *const u8, size));
                }
            }
            count
        }
    }

    pub fn finish(&mut self, topic: &str, partition: i32) -> Result<RecordBatch, ArrowError> {
        let n = self.records;
        let pairs = StructArray::try_new(
            header_fields(),
            vec![Arc::new(self.header_keys.finish()) as ArrayRef, Arc::new(self.header_values.finish())],
            None,
        )?;
        let offsets = std::mem::replace(&mut self.header_offsets, vec![0]);
        let valid = NullBuffer::new(self.header_valid.finish());
        let headers =
            ListArray::try_new(header_item(), OffsetBuffer::new(offsets.into()), Arc::new(pairs), Some(valid))?;
        let stamps = std::mem::take(&mut self.stamps);
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.keys.finish()),
            Arc::new(self.values.finish()),
            Arc::new(headers),
            Arc::new(StringArray::from_iter_values(std::iter::repeat_n(topic, n))),
            Arc::new(arrow_array::Int32Array::from(vec![partition; n])),
            Arc::new(self.offsets.finish()),
            Arc::new(TimestampMicrosecondArray::from(stamps).with_timezone("UTC")),
            Arc::new(self.stamp_types.finish()),
        ];
        self.records = 0;
        self.value_bytes = 0;
        RecordBatch::try_new(schema(), columns)
    }
}
