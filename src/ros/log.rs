//! The node's log as every ROS node logs: printed by rcl as ROS prints (`[INFO] [stamp]
//! [sion_memory]: …`), published on `/rosout`, and filtered by the level set the ROS way
//! (`--ros-args --log-level debug`, or `--log-level sion_memory:=debug`). Until the node exists
//! (a bad parameter, a memory that does not open), the process logs to stderr as any program
//! does.
//!
//! r2r creates no `/rosout` publisher for its nodes (since Humble rcl leaves that to the client
//! library: rclcpp and rclpy call `rcl_logging_rosout_init_publisher_for_node`, r2r does not), so
//! the node publishes its own `rcl_interfaces/msg/Log` there, with rcl's rosout QoS.

use std::sync::{Mutex, OnceLock, PoisonError};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

static LOGGER: OnceLock<String> = OnceLock::new();
type Rosout = (r2r::Publisher<r2r::rcl_interfaces::msg::Log>, super::RosClock);
static ROSOUT: Mutex<Option<Rosout>> = Mutex::new(None);

/// Publish the log on `/rosout` through this publisher, stamped by the node's clock (ROS time:
/// /clock's with use_sim_time), until [`stop_rosout`].
pub fn publish_rosout(publisher: r2r::Publisher<r2r::rcl_interfaces::msg::Log>, clock: super::RosClock) {
    *ROSOUT.lock().unwrap_or_else(PoisonError::into_inner) = Some((publisher, clock));
}

/// Stop publishing on `/rosout` (before the node that owns the publisher is dropped).
pub fn stop_rosout() {
    ROSOUT.lock().unwrap_or_else(PoisonError::into_inner).take();
}

/// rcl's QoS for `/rosout` (`rcl_qos_profile_rosout_default`): reliable, transient local, the
/// last 1,000 kept for late joiners.
pub fn rosout_qos() -> r2r::QosProfile {
    r2r::QosProfile::default().reliable().transient_local().keep_last(1000)
}

/// The level `--ros-args --log-level LEVEL` (or `NODE:=LEVEL` for this node) sets, as tracing
/// names it; `None` when the arguments set none.
pub fn ros_log_level(args: &[String], node: &str) -> Option<Level> {
    let mut level = None;
    for pair in args.windows(2) {
        if pair[0] != "--log-level" {
            continue;
        }
        let value = match pair[1].split_once(":=") {
            Some((name, value)) if name == node => value,
            Some(_) => continue,
            None => pair[1].as_str(),
        };
        level = match value.to_ascii_lowercase().as_str() {
            "debug" => Some(Level::DEBUG),
            "info" => Some(Level::INFO),
            "warn" => Some(Level::WARN),
            "error" | "fatal" => Some(Level::ERROR),
            _ => level,
        };
    }
    level
}

/// From now on the process's log goes through rcl, under this node's logger name.
pub fn through_rcl(logger: &str) {
    let _ = LOGGER.set(logger.to_owned());
}

/// Whether the log goes through rcl yet (the console layer stands down when it does).
pub fn through_rcl_now() -> bool {
    LOGGER.get().is_some()
}

/// The layer that hands each event to rcl (`rcutils_log`) once [`through_rcl`] was called.
pub struct RclLayer;

impl<S: Subscriber> Layer<S> for RclLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let Some(logger) = LOGGER.get() else { return };
        let mut text = Text::default();
        event.record(&mut text);
        let meta = event.metadata();
        let severity = match *meta.level() {
            Level::ERROR => r2r::LogSeverity::Error,
            Level::WARN => r2r::LogSeverity::Warn,
            Level::INFO => r2r::LogSeverity::Info,
            _ => r2r::LogSeverity::Debug,
        };
        // rcl takes C strings: a NUL inside a message (a frame name some publisher sent) is
        // written out, never a reason to fail (r2r would panic on it).
        let message = text.0.replace('\0', "\\0");
        let file = meta.file().unwrap_or("").replace('\0', "");
        let line = meta.line().unwrap_or(0);
        r2r::log(&message, logger, &file, line, severity);
        if let Some((rosout, clock)) = ROSOUT.lock().unwrap_or_else(PoisonError::into_inner).as_ref() {
            let now = super::now(clock);
            // rcl_interfaces/msg/Log's levels.
            let level: u8 = match *meta.level() {
                Level::ERROR => 40,
                Level::WARN => 30,
                Level::INFO => 20,
                _ => 10,
            };
            let log = r2r::rcl_interfaces::msg::Log {
                stamp: super::convert::time(now),
                level,
                name: logger.clone(),
                msg: message,
                file,
                function: String::new(),
                line,
            };
            // Nothing is logged about a failed publish: that would come back here.
            let _ = rosout.publish(&log);
        }
    }
}

/// An event's message, then its other fields as `name=value`.
#[derive(Default)]
struct Text(String);

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write as _;
        if field.name() == "message" {
            let fields = std::mem::take(&mut self.0);
            let _ = write!(self.0, "{value:?}");
            if !fields.is_empty() {
                self.0.push(' ');
                self.0.push_str(&fields);
            }
        } else {
            if !self.0.is_empty() {
                self.0.push(' ');
            }
            let _ = write!(self.0, "{}={value:?}", field.name());
        }
    }
}
