//! Log levels, and the level-named shortcuts (`ctx.info(..)`, ...) that the
//! workflow and step contexts share.

use crate::bindings::stepstone::workflow::types::LogLevel;

/// How much a log line matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

impl Level {
    pub(crate) fn to_wit(self) -> LogLevel {
        match self {
            Self::Trace => LogLevel::Trace,
            Self::Debug => LogLevel::Debug,
            Self::Info => LogLevel::Info,
            Self::Warn => LogLevel::Warn,
            Self::Error => LogLevel::Error,
        }
    }
}

/// Adds `trace`, `debug`, `info`, `warn` and `error` to a context type that
/// has `fn log(&self, Level, &str)`; a macro rather than a trait so the
/// shortcuts work without importing anything.
macro_rules! level_shortcuts {
    ($context:ty) => {
        impl $context {
            $crate::log::level_shortcuts!(@level trace, Trace);
            $crate::log::level_shortcuts!(@level debug, Debug);
            $crate::log::level_shortcuts!(@level info, Info);
            $crate::log::level_shortcuts!(@level warn, Warn);
            $crate::log::level_shortcuts!(@level error, Error);
        }
    };
    (@level $method:ident, $level:ident) => {
        #[doc = concat!("Logs `message` at [`Level::", stringify!($level), "`](crate::Level::", stringify!($level), ").")]
        pub fn $method(&self, message: &str) {
            self.log($crate::Level::$level, message);
        }
    };
}
pub(crate) use level_shortcuts;
