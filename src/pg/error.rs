//! The one error boundary: every ERROR and WARNING the extension raises
//! goes out through [`Report`], with its SQLSTATE, detail and hint; the
//! pure core's errors (options, encoding) become PostgreSQL errors here.
//! Messages never carry anything internal (a Rust backtrace is turned off
//! in `_PG_init`).

use pgrx::pg_sys::panic::ErrorReport;
use pgrx::{PgLogLevel, PgSqlErrorCode};

use pubjson_core::model::EncodeError;
use pubjson_core::options::{OptionError, OptionErrorKind};

/// A report to raise: a message with its SQLSTATE, optional detail and
/// hint.
#[must_use = "a report does nothing until raised"]
pub struct Report {
    code: PgSqlErrorCode,
    message: String,
    detail: Option<String>,
    hint: Option<String>,
}

impl Report {
    pub fn new(code: PgSqlErrorCode, message: impl Into<String>) -> Self {
        Report {
            code,
            message: message.into(),
            detail: None,
            hint: None,
        }
    }

    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// A hint; an empty one is none.
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        let hint = hint.into();
        self.hint = (!hint.is_empty()).then_some(hint);
        self
    }

    fn report(self, level: PgLogLevel) {
        let mut report = ErrorReport::new(self.code, self.message, "pubjson");
        if let Some(detail) = self.detail {
            report = report.set_detail(detail);
        }
        if let Some(hint) = self.hint {
            report = report.set_hint(hint);
        }
        report.report(level);
    }

    /// Raises it as an ERROR.
    pub fn error(self) -> ! {
        self.report(PgLogLevel::ERROR);
        unreachable!("an ERROR does not return")
    }

    /// Sends it as a WARNING.
    pub fn warning(self) {
        self.report(PgLogLevel::WARNING);
    }
}

/// A WARNING with only a message (SQLSTATE 01000, warning).
pub fn warn(message: impl Into<String>) {
    Report::new(PgSqlErrorCode::ERRCODE_WARNING, message).warning();
}

/// An error that cannot happen unless PostgreSQL broke an invariant the
/// extension relies on (XX000).
pub fn internal(message: impl Into<String>) -> ! {
    Report::new(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, message).error()
}

impl From<OptionError> for Report {
    fn from(err: OptionError) -> Self {
        let code = match err.kind {
            OptionErrorKind::InvalidParameterValue => {
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE
            }
            OptionErrorKind::InvalidName => PgSqlErrorCode::ERRCODE_INVALID_NAME,
            OptionErrorKind::FeatureNotSupported => PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            OptionErrorKind::SyntaxError => PgSqlErrorCode::ERRCODE_SYNTAX_ERROR,
        };
        Report::new(code, err.message).hint(err.hint.unwrap_or_default())
    }
}

impl From<EncodeError> for Report {
    fn from(err: EncodeError) -> Self {
        Report::new(PgSqlErrorCode::ERRCODE_DATA_EXCEPTION, err.to_string())
    }
}
