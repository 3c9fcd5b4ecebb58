//! Schema Registry Avro payloads decoded into Arrow columns with arrow-avro (`s3_archive_native.AvroDecoder`;
//! `archive/executor/avro_columnar.py` is its one caller): a batch of Confluent-framed payloads (an Arrow binary
//! array) becomes, per writer schema, the rows it holds and a struct array of the writer's fields, without a Python
//! object per record. Any payload this decoder does not decode exactly as one framed record (not framed, a schema id
//! it was not given, a body that does not decode or that avro_check.rs refuses, bytes left over) makes the whole
//! batch `None`: the caller then decodes that batch with fastavro, which gives each bad record its reason.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, BinaryArray, Int64Array, LargeBinaryArray, RecordBatch, StructArray};
use arrow_avro::reader::{Decoder, ReaderBuilder};
use arrow_avro::schema::{AvroSchema, Fingerprint, FingerprintAlgorithm, SchemaStore};
use arrow_schema::{DataType, Field, Schema};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use crate::avro_check::Schema as BodyCheck;
use crate::py_producer::import;

const HEADER: usize = 5; // magic byte 0 and a 4-byte big-endian schema id

/// One writer schema's decoder and the rows of the current batch it decoded.
struct Writer {
    text: String,
    shape: BodyCheck,
    decoder: Decoder,
    rows: Vec<i64>,
}

fn decoder(id: u32, text: &str) -> Result<Decoder, String> {
    let mut store = SchemaStore::new_with_type(FingerprintAlgorithm::Id);
    store
        .set(Fingerprint::Id(id), AvroSchema::new(text.to_string()))
        .map_err(|e| format!("schema id {id}: {e}"))?;
    // one batch of the caller's is one batch here (the capacity only counts rows; nothing is allocated for it)
    ReaderBuilder::new()
        .with_writer_schema_store(store)
        .with_batch_size(1 << 40)
        .build_decoder()
        .map_err(|e| format!("schema id {id}: {e}"))
}

/// Payloads of the given writer schemas (id, Avro schema JSON) into per-schema struct arrays.
#[pyclass(name = "AvroDecoder", unsendable)]
pub struct PyAvroDecoder {
    writers: HashMap<u32, Writer>,
}

impl PyAvroDecoder {
    /// Every decoder back to an empty batch (after a payload it could not decode left one mid-record).
    fn reset(&mut self) -> Result<(), String> {
        for (id, w) in self.writers.iter_mut() {
            w.decoder = decoder(*id, &w.text)?;
            w.rows.clear();
        }
        Ok(())
    }

    /// The rows of each writer schema, or None when a payload is not one record of a known schema.
    fn decode_all<'a>(&mut self, payload: impl Fn(usize) -> Option<&'a [u8]>, n: usize) -> Option<()> {
        for i in 0..n {
            let Some(p) = payload(i) else { continue };
            if p.len() < HEADER || p[0] != 0 {
                return None;
            }
            let id = u32::from_be_bytes([p[1], p[2], p[3], p[4]]);
            let w = self.writers.get_mut(&id)?;
            // exactly one record, every union branch and enum index in range (avro_check.rs)
            if !w.shape.accepts(&p[HEADER..]) {
                return None;
            }
            let before = w.decoder.capacity();
            match w.decoder.decode(p) {
                Ok(used) if used == p.len() && w.decoder.capacity() + 1 == before => w.rows.push(i as i64),
                _ => return None,
            }
        }
        Some(())
    }
}

#[pymethods]
impl PyAvroDecoder {
    #[new]
    fn new(schemas: Vec<(u32, String)>) -> PyResult<Self> {
        let mut writers = HashMap::new();
        for (id, text) in schemas {
            let shape = BodyCheck::parse(&text).map_err(|e| PyValueError::new_err(format!("schema id {id}: {e}")))?;
            let decoder = decoder(id, &text).map_err(PyValueError::new_err)?;
            writers.insert(id, Writer { text, shape, decoder, rows: Vec::new() });
        }
        Ok(PyAvroDecoder { writers })
    }

    /// `payloads` (an Arrow binary array, nulls skipped) decoded: a list of (schema id, `DecodedRows`) in no
    /// particular order, or None when some payload must be decoded by the caller's own decoder.
    fn decode(&mut self, payloads: &Bound<'_, PyAny>) -> PyResult<Option<Vec<(u32, DecodedRows)>>> {
        let array = import(payloads, "payloads")?;
        let n = array.len();
        let done = match array.data_type() {
            DataType::Binary => {
                let a = array.as_any().downcast_ref::<BinaryArray>().expect("a binary array");
                self.decode_all(|i| a.is_valid(i).then(|| a.value(i)), n)
            }
            DataType::LargeBinary => {
                let a = array.as_any().downcast_ref::<LargeBinaryArray>().expect("a large binary array");
                self.decode_all(|i| a.is_valid(i).then(|| a.value(i)), n)
            }
            _ => None,
        };
        let mut out = Vec::new();
        let mut flushed = done.is_some();
        if flushed {
            for (id, w) in self.writers.iter_mut() {
                if w.rows.is_empty() {
                    continue;
                }
                match w.decoder.flush() {
                    Ok(Some(batch)) if batch.num_rows() == w.rows.len() => {
                        let rows: ArrayRef = Arc::new(Int64Array::from(std::mem::take(&mut w.rows)));
                        let value: ArrayRef = Arc::new(StructArray::from(batch));
                        out.push((*id, DecodedRows::new(rows, value)?));
                    }
                    _ => {
                        // a value arrow-avro refuses when it builds the columns (e.g. a string that is not UTF-8)
                        flushed = false;
                        break;
                    }
                }
            }
        }
        if !flushed {
            self.reset().map_err(PyValueError::new_err)?;
            return Ok(None);
        }
        Ok(Some(out))
    }
}

/// One writer schema's rows of a batch, exported once through the Arrow PyCapsule interface as a struct of
/// `row` (int64, the payload's index in the batch) and `value` (the decoded record).
#[pyclass]
pub struct DecodedRows {
    batch: Option<RecordBatch>,
}

impl DecodedRows {
    fn new(rows: ArrayRef, value: ArrayRef) -> PyResult<Self> {
        let schema = Schema::new(vec![
            Field::new("row", DataType::Int64, false),
            Field::new("value", value.data_type().clone(), true),
        ]);
        let batch = RecordBatch::try_new(Arc::new(schema), vec![rows, value])
            .map_err(|e| PyValueError::new_err(format!("decoded rows: {e}")))?;
        Ok(DecodedRows { batch: Some(batch) })
    }
}

#[pymethods]
impl DecodedRows {
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_array__<'py>(
        &mut self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<(Bound<'py, PyCapsule>, Bound<'py, PyCapsule>)> {
        let _ = requested_schema; // the decoded schema is the one given
        let batch = self.batch.take().ok_or_else(|| PyValueError::new_err("these rows were already exported"))?;
        crate::export_batch(py, batch)
    }

    fn __len__(&self) -> usize {
        self.batch.as_ref().map_or(0, |b| b.num_rows())
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyAvroDecoder>()?;
    m.add_class::<DecodedRows>()?;
    Ok(())
}
