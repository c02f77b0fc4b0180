//! One non-null value as PostgreSQL's side would deliver it, for the value
//! encoders' unit tests of every format.

use crate::model::{ArrayRef, ArrayValues, ColumnMeta, TupleValues, Value};

/// `value` (`None`: an array, whose elements are `array`), and the text the
/// column's output function would print.
pub struct OneValue<'v> {
    pub value: Option<Value<'v>>,
    pub text: &'v [u8],
    pub array: Option<Elements<'v>>,
}

impl<'v> OneValue<'v> {
    /// A value that is not an array.
    pub fn scalar(value: Value<'v>, text: &'v [u8]) -> Self {
        OneValue {
            value: Some(value),
            text,
            array: None,
        }
    }
}

/// The elements of an array value, with their output function's texts.
pub struct Elements<'v> {
    pub dims: Vec<usize>,
    pub default_bounds: bool,
    pub elements: Vec<Option<Value<'v>>>,
    pub texts: Vec<&'v [u8]>,
}

impl ArrayValues for Elements<'_> {
    fn dims(&self) -> &[usize] {
        &self.dims
    }
    fn default_bounds(&self) -> bool {
        self.default_bounds
    }
    fn element(&self, i: usize) -> Option<Value<'_>> {
        self.elements[i]
    }
    fn element_text(&self, i: usize) -> &[u8] {
        self.texts[i]
    }
}

impl TupleValues for OneValue<'_> {
    fn is_null(&self, _: &ColumnMeta) -> bool {
        false
    }
    fn is_unchanged_toast(&self, _: &ColumnMeta) -> bool {
        false
    }
    fn value<'a>(&'a self, c: &'a ColumnMeta) -> Value<'a> {
        self.value
            .unwrap_or_else(|| Value::Array(ArrayRef::new(self, c)))
    }
    fn text(&self, _: &ColumnMeta) -> &[u8] {
        self.text
    }
    fn read_array(&self, _: &ColumnMeta, visit: &mut dyn FnMut(&dyn ArrayValues)) {
        if let Some(array) = &self.array {
            visit(array);
        }
    }
}
