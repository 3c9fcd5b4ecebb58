//! s3-archive's native Kafka client (docs/performance.md): the write task's offset range read with librdkafka and
//! built into Arrow envelope batches here (`task_reader: native`; `archive/executor/native_read.py` is its one
//! caller), and a (transactional) producer that sends Arrow batches (`restore/native_producer.py`); both exchange
//! Arrow data with Python through the Arrow C data interface (`__arrow_c_array__`), so no Python object is made or
//! read per record. Schema Registry Avro payloads are decoded into Arrow columns here too (avro_decode.rs;
//! `archive/executor/avro_columnar.py` is its caller).

mod avro_check;
mod avro_decode;
mod envelope;
mod producer;
mod py_producer;
mod reader;
mod rows;

use std::ffi::CString;
use std::time::Duration;

use arrow_array::{Array, RecordBatch, StructArray};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use crate::reader::{Range, RangeReader};

create_exception!(s3_archive_native, ReadError, PyException, "A range could not be read (the text says why).");

/// Offsets [start, end) of one partition as envelope batches; an iterator of `EnvelopeBatch`.
#[pyclass(name = "RangeReader", unsendable)]
struct PyRangeReader {
    inner: RangeReader,
}

#[pymethods]
impl PyRangeReader {
    #[new]
    #[pyo3(signature = (config, servers, topic, partition, start, end, stall_s, batch_records, batch_bytes))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        config: Vec<(String, String)>,
        servers: String,
        topic: String,
        partition: i32,
        start: i64,
        end: i64,
        stall_s: f64,
        batch_records: usize,
        batch_bytes: usize,
    ) -> PyResult<Self> {
        if !(stall_s.is_finite() && stall_s > 0.0) || batch_records == 0 || batch_bytes == 0 {
            return Err(PyValueError::new_err(format!(
                "stall_s must be > 0, batch_records and batch_bytes >= 1; got {stall_s}, {batch_records}, {batch_bytes}"
            )));
        }
        let range = Range {
            servers,
            topic,
            partition,
            start,
            end,
            stall: Duration::from_secs_f64(stall_s),
            batch_records,
            batch_bytes,
        };
        RangeReader::open(&config, range).map(|inner| PyRangeReader { inner }).map_err(ReadError::new_err)
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<EnvelopeBatch>> {
        let inner = &mut self.inner;
        match py.detach(|| inner.next_batch()) {
            Ok(Some(batch)) => Ok(Some(EnvelopeBatch { batch: Some(batch) })),
            Ok(None) => Ok(None),
            Err(text) => Err(ReadError::new_err(text)),
        }
    }
}

/// One envelope batch, exported once through the Arrow PyCapsule interface (`pyarrow.record_batch(it)`).
#[pyclass]
struct EnvelopeBatch {
    batch: Option<RecordBatch>,
}

#[pymethods]
impl EnvelopeBatch {
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_array__<'py>(
        &mut self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<(Bound<'py, PyCapsule>, Bound<'py, PyCapsule>)> {
        let _ = requested_schema; // the envelope's own schema is the one given
        let batch = self.batch.take().ok_or_else(|| PyValueError::new_err("this batch was already exported"))?;
        export_batch(py, batch)
    }

    fn __len__(&self) -> usize {
        self.batch.as_ref().map_or(0, |b| b.num_rows())
    }
}

/// A batch as the Arrow C data interface's (schema, array) capsules of one struct array: what `__arrow_c_array__`
/// returns, for `pyarrow.array(obj)` to take without a copy.
pub(crate) fn export_batch(py: Python<'_>, batch: RecordBatch) -> PyResult<(Bound<'_, PyCapsule>, Bound<'_, PyCapsule>)> {
    let data = StructArray::from(batch).into_data();
    let (array, schema) =
        arrow_array::ffi::to_ffi(&data).map_err(|e| PyValueError::new_err(format!("arrow export: {e}")))?;
    let schema = PyCapsule::new(py, schema, Some(CString::new("arrow_schema")?))?;
    let array = PyCapsule::new(py, array, Some(CString::new("arrow_array")?))?;
    Ok((schema, array))
}

#[pymodule]
fn s3_archive_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyRangeReader>()?;
    m.add_class::<EnvelopeBatch>()?;
    m.add("ReadError", m.py().get_type::<ReadError>())?;
    py_producer::register(m)?;
    avro_decode::register(m)?;
    Ok(())
}
