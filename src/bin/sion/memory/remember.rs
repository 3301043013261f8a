//! `sion memory remember`: atoms from JSON lines, durable.

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Args;
use sion_memory::atom::Atom;

use crate::common::{DataArg, open_memory};
use crate::ui;

#[derive(Args)]
pub(crate) struct RememberArgs {
    #[command(flatten)]
    pub(crate) data: DataArg,
    /// JSON lines to read, or `-` for standard input.
    #[arg(default_value = "-")]
    pub(crate) input: PathBuf,
    /// Atoms per durable batch (one fsync each).
    #[arg(long, default_value_t = 4096)]
    pub(crate) batch: usize,
    /// Print each atom as JSON with its id and position once it is durable.
    #[arg(long)]
    pub(crate) echo: bool,
    /// Skip lines that are not valid atoms (counted and reported) instead of stopping.
    #[arg(long)]
    pub(crate) skip_bad: bool,
}

pub(crate) enum Input {
    Batch(Vec<Atom>),
}

pub(crate) fn remember(a: RememberArgs) -> Result<ExitCode> {
    let memory = open_memory(&a.data.data)?;
    let batch_size = a.batch.max(1);
    let (reader, len): (Box<dyn BufRead + Send>, Option<u64>) = if a.input.as_os_str() == "-" {
        (Box::new(BufReader::with_capacity(1 << 20, io::stdin())), None)
    } else {
        let f = File::open(&a.input).with_context(|| format!("opening {}", a.input.display()))?;
        let len = f.metadata().map(|m| m.len()).ok();
        (Box::new(BufReader::with_capacity(1 << 20, f)), len)
    };
    let bar = ui::byte_bar(len.unwrap_or(0));
    if len.is_none() {
        bar.set_length(0);
    }
    let started = Instant::now();

    // Parse on this thread while the previous batch is made durable on another.
    let (tx, rx) = mpsc::sync_channel::<Input>(2);
    let echo = a.echo;
    let writer = std::thread::scope(|scope| -> Result<(Stats, Result<u64>)> {
        let bar_ref = &bar;
        let memory_ref = &memory;
        let appender = scope.spawn(move || -> Result<Stats> {
            let mut stats = Stats::default();
            let stdout = io::stdout();
            let mut out = BufWriter::new(stdout.lock());
            for Input::Batch(atoms) in rx {
                let echoed: Vec<Atom> = if echo { atoms.clone() } else { Vec::new() };
                let got = memory_ref.remember(atoms).context("appending to the log")?;
                for (i, ap) in got.iter().enumerate() {
                    stats.note(ap.position, ap.new);
                    if let Some(atom) = echoed.get(i) {
                        writeln!(out, "{}", atom.to_json_line(Some(ap.position)))
                            .map_err(crate::stdout_failed)?;
                    }
                }
                out.flush().map_err(crate::stdout_failed)?;
                bar_ref.set_message(format!("{} atoms durable", ui::count(stats.total)));
            }
            Ok(stats)
        });
        let parsed = parse_lines(reader, batch_size, a.skip_bad, &tx, &bar);
        drop(tx);
        let stats = appender.join().map_err(|_| anyhow::anyhow!("the appending thread panicked"))??;
        Ok((stats, parsed))
    })?;
    bar.finish_and_clear();
    let (stats, parsed) = writer;
    let secs = started.elapsed().as_secs_f64();
    let head = memory.log().head();
    let committed = memory.committed().head.size;
    match (stats.first, stats.last) {
        (Some(first), Some(last)) => eprintln!(
            "remembered {} atoms in {secs:.2} s ({} new, {} already held): durable at positions {first}..={last}",
            ui::count(stats.total),
            ui::count(stats.new),
            ui::count(stats.total - stats.new)
        ),
        _ => eprintln!("remembered no atoms"),
    }
    eprintln!(
        "log holds {} atoms (root {}); {} not committed yet{}",
        ui::count(head.size),
        ui::short(&head.root),
        ui::count(head.size - committed),
        if head.size > committed { ": run `sion memory commit`" } else { "" }
    );
    match parsed {
        Ok(skipped) if skipped > 0 => {
            eprintln!("skipped {skipped} lines that were not valid atoms");
            Ok(ExitCode::SUCCESS)
        }
        Ok(_) => Ok(ExitCode::SUCCESS),
        Err(e) => Err(e),
    }
}

#[derive(Default)]
pub(crate) struct Stats {
    pub(crate) total: u64,
    pub(crate) new: u64,
    pub(crate) first: Option<u64>,
    pub(crate) last: Option<u64>,
}

impl Stats {
    fn note(&mut self, position: u64, new: bool) {
        self.total += 1;
        self.new += u64::from(new);
        self.first = Some(self.first.map_or(position, |f| f.min(position)));
        self.last = Some(self.last.map_or(position, |l| l.max(position)));
    }
}

/// Read JSON lines into batches; returns how many bad lines were skipped.
/// The longest input line taken as an atom. An atom's JSON is far smaller (docs/ATOM.md bounds
/// its parts); a longer line is refused without being held in memory whole.
pub(crate) const MAX_LINE_BYTES: usize = 16 << 20;

/// Reads one line (without its newline) into `buf`, holding at most `MAX_LINE_BYTES` of it.
/// Returns the bytes the line took in the input (0 at the end) and whether it was longer.
pub(crate) fn read_line_bounded(reader: &mut dyn BufRead, buf: &mut Vec<u8>) -> io::Result<(usize, bool)> {
    buf.clear();
    let mut taken = io::Read::take(&mut *reader, MAX_LINE_BYTES as u64 + 1).read_until(b'\n', buf)?;
    if buf.last() == Some(&b'\n') {
        buf.pop();
        return Ok((taken, false));
    }
    if buf.len() <= MAX_LINE_BYTES {
        return Ok((taken, false)); // the last line, without a newline
    }
    // Too long: pass over the rest of the line without keeping it.
    buf.clear();
    loop {
        let chunk = reader.fill_buf()?;
        if chunk.is_empty() {
            return Ok((taken, true));
        }
        match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => {
                reader.consume(i + 1);
                return Ok((taken + i + 1, true));
            }
            None => {
                let n = chunk.len();
                reader.consume(n);
                taken += n;
            }
        }
    }
}

pub(crate) fn parse_lines(
    mut reader: Box<dyn BufRead + Send>,
    batch_size: usize,
    skip_bad: bool,
    tx: &mpsc::SyncSender<Input>,
    bar: &indicatif::ProgressBar,
) -> Result<u64> {
    let mut batch = Vec::with_capacity(batch_size);
    let mut skipped = 0u64;
    let mut first_skip_reported = false;
    let mut buf = Vec::new();
    let mut offset = 0u64; // of the line's first byte in the input
    for number in 1u64.. {
        let read = read_line_bounded(&mut *reader, &mut buf);
        let (taken, too_long) = match read {
            Ok(r) => r,
            Err(e) => {
                // What came before is made durable before the run stops.
                if !batch.is_empty() {
                    let _ = tx.send(Input::Batch(std::mem::take(&mut batch)));
                }
                return Err(anyhow::Error::new(e)
                    .context(format!("reading line {number} (the atoms before it are durable)")));
            }
        };
        if taken == 0 {
            break;
        }
        bar.inc(taken as u64);
        let line_offset = offset;
        offset += taken as u64;
        let parsed: std::result::Result<Atom, String> = if too_long {
            Err(format!("the line is longer than {} MiB", MAX_LINE_BYTES >> 20))
        } else {
            match std::str::from_utf8(&buf) {
                Err(e) => Err(format!(
                    "not UTF-8 at byte {} of the input (byte {} of the line)",
                    line_offset + e.valid_up_to() as u64,
                    e.valid_up_to() + 1
                )),
                Ok(line) if line.trim().is_empty() => continue,
                Ok(line) => Atom::from_json(line).map_err(|e| e.to_string()),
            }
        };
        match parsed {
            Ok(atom) => batch.push(atom),
            Err(e) if skip_bad => {
                skipped += 1;
                if !first_skip_reported {
                    bar.suspend(|| eprintln!("skipping line {number}: {e}"));
                    first_skip_reported = true;
                }
            }
            Err(e) => {
                if !batch.is_empty() {
                    let _ = tx.send(Input::Batch(std::mem::take(&mut batch)));
                }
                bail!("line {number}: {e} (the atoms before it are durable; --skip-bad skips such lines)");
            }
        }
        if batch.len() >= batch_size
            && tx.send(Input::Batch(std::mem::replace(&mut batch, Vec::with_capacity(batch_size)))).is_err()
        {
            // The appender stopped (it reports why).
            return Ok(skipped);
        }
    }
    if !batch.is_empty() {
        let _ = tx.send(Input::Batch(batch));
    }
    Ok(skipped)
}
