//! Play a ROS 2 bag (MCAP) onto its topics, as `ros2 bag play` does, where ROS 2 has no
//! `ros2` command (the Python registry's ROS 2). Messages go out as the CDR bytes the bag
//! holds, at their recorded pace (scaled by `--rate`), latched topics transient local.
//!
//! ```sh
//! . scripts/setup.sh && sion_install_node --bag-play
//! bag_play bags/demo.mcap [--rate 2] [--topics /pose,/tf]
//! ```

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use clap::Parser;
use r2r::QosProfile;
use sion_memory::bag::{BagReader, Event};

#[derive(Parser)]
#[command(about = "Play a ROS 2 bag (MCAP) onto its topics")]
struct Args {
    bag: PathBuf,
    /// Speed relative to the recording (2 = twice as fast).
    #[arg(long, default_value_t = 1.0)]
    rate: f64,
    /// Only these topics (comma separated); default all.
    #[arg(long, value_delimiter = ',')]
    topics: Vec<String>,
    /// Wait this long for a subscriber on every topic before playing [s].
    #[arg(long, default_value_t = 10.0)]
    wait_s: f64,
}

fn main() -> Result<()> {
    let args = Args::parse();
    if !(args.rate.is_finite() && args.rate > 0.0) {
        bail!("--rate must be positive");
    }
    let bytes = std::fs::read(&args.bag).with_context(|| format!("reading {}", args.bag.display()))?;
    let ctx = r2r::Context::create()?;
    let mut node = r2r::Node::create(ctx, "sion_bag_play", "")?;

    // First pass: the topics and their QoS.
    let mut publishers = HashMap::new();
    let mut count = 0u64;
    for event in BagReader::new(&bytes)? {
        let Event::Message(m) = event? else { continue };
        count += 1;
        if publishers.contains_key(&m.topic.id)
            || (!args.topics.is_empty() && !args.topics.contains(&m.topic.name))
        {
            continue;
        }
        let latched = m.topic.name.ends_with("tf_static") || m.topic.message_type.ends_with("OccupancyGrid");
        let qos = if latched {
            QosProfile::default().keep_last(10).transient_local()
        } else {
            QosProfile::default().keep_last(1000)
        };
        let publisher = node
            .create_publisher_untyped(&m.topic.name, &m.topic.message_type, qos)
            .with_context(|| format!("publishing {} ({})", m.topic.name, m.topic.message_type))?;
        publishers.insert(m.topic.id, (m.topic.name.clone(), publisher));
    }
    let deadline = Instant::now() + Duration::from_secs_f64(args.wait_s);
    for (topic, p) in publishers.values() {
        while p.get_inter_process_subscription_count().unwrap_or(0) == 0 {
            if Instant::now() > deadline {
                eprintln!("bag_play: nobody subscribes to {topic}; playing anyway");
                break;
            }
            node.spin_once(Duration::from_millis(20));
        }
    }
    std::thread::sleep(Duration::from_millis(300)); // matched here; let the other side match too

    let started = Instant::now();
    let mut first = None;
    let mut played = 0u64;
    for event in BagReader::new(&bytes)? {
        let Event::Message(m) = event? else { continue };
        let Some((_, publisher)) = publishers.get(&m.topic.id) else { continue };
        let first = *first.get_or_insert(m.log_time);
        let due =
            started + Duration::from_secs_f64(m.log_time.saturating_sub(first) as f64 / 1e9 / args.rate);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        publisher.publish_raw(&m.data).with_context(|| format!("publishing on {}", m.topic.name))?;
        played += 1;
    }
    // Reliable samples not yet acknowledged would be lost with their writers: linger.
    let linger = Instant::now() + Duration::from_secs(1);
    while Instant::now() < linger {
        node.spin_once(Duration::from_millis(50));
    }
    eprintln!("bag_play: played {played} of {count} messages in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}
