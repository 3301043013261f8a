//! What the memory brain derives from what it folds (docs/BRAIN.md, "Derivations"). Every rule
//! is a deterministic function of the input atoms in log order, so re-deriving after a restart
//! gives byte-identical atoms, which the log takes as no-ops.

use std::collections::{BTreeMap, HashMap};

use sion_store::index::geom::SpaceTime;
use sion_verify::atom::{
    Atom, AtomId, AtomParts, BoxMm, Extractor, Interval, Kind, Link, LinkRel, Payload, Permille,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeriveConfig {
    /// Poses of one subject are summarised per window of this many seconds (by `from`).
    pub trajectory_window_s: u64,
    /// Observations are summarised per window of this many seconds and per square tile.
    pub coverage_window_s: u64,
    pub coverage_tile_mm: i64,
}

impl Default for DeriveConfig {
    fn default() -> Self {
        Self { trajectory_window_s: 60, coverage_window_s: 600, coverage_tile_mm: 100_000 }
    }
}

const CODE_TRAJECTORY: &str = "sion_memory brain: trajectory v1";
const CODE_COVERAGE: &str = "sion_memory brain: coverage v1";
const CODE_CONFLICT: &str = "sion_memory brain: conflict v1";

fn union(a: &BoxMm, b: &BoxMm) -> BoxMm {
    BoxMm {
        min_mm: [a.min_mm[0].min(b.min_mm[0]), a.min_mm[1].min(b.min_mm[1]), a.min_mm[2].min(b.min_mm[2])],
        max_mm: [a.max_mm[0].max(b.max_mm[0]), a.max_mm[1].max(b.max_mm[1]), a.max_mm[2].max(b.max_mm[2])],
    }
}

fn disjoint(a: &BoxMm, b: &BoxMm) -> bool {
    (0..3).any(|i| a.max_mm[i] < b.min_mm[i] || b.max_mm[i] < a.min_mm[i])
}

#[derive(Debug, Clone)]
struct Run {
    window: i64,
    ids: Vec<AtomId>,
    bounds: BoxMm,
    from_ns: i64,
    to_ns: i64,
    confidence: u16,
}

#[derive(Debug, Clone)]
struct Seen {
    id: AtomId,
    frame: String,
    bounds: BoxMm,
    valid: Interval,
    confidence: u16,
}

/// The accumulators of the derivation rules.
#[derive(Debug, Clone, Default)]
pub struct Deriver {
    config: DeriveConfig,
    /// (subject, frame) → the open window of poses.
    runs: HashMap<(String, String), Run>,
    /// The open coverage window and, per (frame, tile), what was seen in it.
    coverage_window: Option<i64>,
    tiles: BTreeMap<(String, i64, i64), (BoxMm, u64)>,
    /// Subject → its latest observation.
    last_seen: HashMap<String, Seen>,
}

impl Deriver {
    pub fn new(config: DeriveConfig) -> Self {
        Self { config, ..Self::default() }
    }

    /// Take in one atom of the log (in order); returns the atoms it lets the brain derive.
    pub fn take(&mut self, atom: &Atom) -> Vec<Atom> {
        let p = atom.parts();
        let mut out = Vec::new();
        match p.kind {
            Kind::Pose if !p.subject.is_empty() => self.pose(atom, &mut out),
            Kind::Observation => {
                self.coverage(p, &mut out);
                if !p.subject.is_empty() {
                    self.conflict(atom, &mut out);
                }
            }
            _ => {}
        }
        out
    }

    fn pose(&mut self, atom: &Atom, out: &mut Vec<Atom>) {
        let p = atom.parts();
        let window_ns = (self.config.trajectory_window_s.max(1) as i64).saturating_mul(1_000_000_000);
        let window = p.valid.from_ns.div_euclid(window_ns);
        let key = (p.subject.clone(), p.frame.clone());
        let fresh = || Run {
            window,
            ids: vec![atom.id()],
            bounds: p.bounds,
            from_ns: p.valid.from_ns,
            to_ns: p.valid.to_ns,
            confidence: p.confidence.0,
        };
        match self.runs.get_mut(&key) {
            None => {
                self.runs.insert(key, fresh());
            }
            Some(run) if run.window == window => {
                run.ids.push(atom.id());
                run.bounds = union(&run.bounds, &p.bounds);
                run.from_ns = run.from_ns.min(p.valid.from_ns);
                run.to_ns = run.to_ns.max(p.valid.to_ns);
                run.confidence = run.confidence.min(p.confidence.0);
            }
            // A pose of a later window closes the run; a late pose of an earlier one is left out.
            Some(run) if run.window < window => {
                let done = std::mem::replace(run, fresh());
                out.extend(trajectory(&key.0, &key.1, &done));
            }
            Some(_) => {}
        }
    }

    fn coverage(&mut self, p: &AtomParts, out: &mut Vec<Atom>) {
        let window_ns = (self.config.coverage_window_s.max(1) as i64).saturating_mul(1_000_000_000);
        let window = p.valid.from_ns.div_euclid(window_ns);
        match self.coverage_window {
            Some(w) if window < w => return,
            Some(w) if window > w => {
                for ((frame, tx, ty), (bounds, count)) in std::mem::take(&mut self.tiles) {
                    let valid = Interval { from_ns: w * window_ns, to_ns: (w + 1) * window_ns };
                    let mut parts = AtomParts::new(Kind::Coverage, &frame, bounds, valid, Permille(1000));
                    parts.subject = format!("tile {tx} {ty}");
                    parts.payload = Payload::Text(format!("{count} observations"));
                    parts.extractor = Some(Extractor { model: String::new(), code: CODE_COVERAGE.into() });
                    out.extend(Atom::new(parts).ok());
                }
                self.coverage_window = Some(window);
            }
            Some(_) => {}
            None => self.coverage_window = Some(window),
        }
        let tile = self.config.coverage_tile_mm.max(1);
        let centre = SpaceTime { min_mm: p.bounds.min_mm, max_mm: p.bounds.max_mm, from_ns: 0, to_ns: 0 };
        let key = (p.frame.clone(), centre.center(0).div_euclid(tile), centre.center(1).div_euclid(tile));
        let entry = self.tiles.entry(key).or_insert((p.bounds, 0));
        entry.0 = union(&entry.0, &p.bounds);
        entry.1 += 1;
    }

    fn conflict(&mut self, atom: &Atom, out: &mut Vec<Atom>) {
        let p = atom.parts();
        let seen = Seen {
            id: atom.id(),
            frame: p.frame.clone(),
            bounds: p.bounds,
            valid: p.valid,
            confidence: p.confidence.0,
        };
        if let Some(last) = self.last_seen.insert(p.subject.clone(), seen)
            && last.frame == p.frame
            && last.valid.from_ns < p.valid.to_ns
            && p.valid.from_ns < last.valid.to_ns
            && disjoint(&last.bounds, &p.bounds)
        {
            // One thing in two places at once: both observations stay, the conflict names them.
            let valid = Interval {
                from_ns: last.valid.from_ns.max(p.valid.from_ns),
                to_ns: last.valid.to_ns.min(p.valid.to_ns),
            };
            let mut parts = AtomParts::new(
                Kind::Conflict,
                &p.frame,
                union(&last.bounds, &p.bounds),
                valid,
                Permille(last.confidence.min(p.confidence.0)),
            );
            parts.subject = p.subject.clone();
            parts.links = vec![
                Link { rel: LinkRel::Contradicts, target: last.id },
                Link { rel: LinkRel::Contradicts, target: atom.id() },
            ];
            parts.payload = Payload::Text(format!("observations disagree about where {} is", p.subject));
            parts.extractor = Some(Extractor { model: String::new(), code: CODE_CONFLICT.into() });
            out.extend(Atom::new(parts).ok());
        }
    }
}

/// The trajectory atom of a closed run of poses: their union, their time span, the lowest
/// confidence, and up to 64 of the poses (first and last included, evenly spaced) as sources.
fn trajectory(subject: &str, frame: &str, run: &Run) -> Option<Atom> {
    let n = run.ids.len();
    let picks: Vec<AtomId> = if n <= 64 {
        run.ids.clone()
    } else {
        let mut v: Vec<AtomId> = (0..64).map(|i| run.ids[i * (n - 1) / 63]).collect();
        v.dedup();
        v
    };
    let mut parts = AtomParts::new(
        Kind::Trajectory,
        frame,
        run.bounds,
        Interval { from_ns: run.from_ns, to_ns: run.to_ns },
        Permille(run.confidence),
    );
    parts.subject = subject.to_owned();
    parts.sources = picks;
    parts.payload = Payload::Text(format!("{n} poses"));
    parts.extractor = Some(Extractor { model: String::new(), code: CODE_TRAJECTORY.into() });
    Atom::new(parts).ok()
}

/// The deriver's state as bytes, so a restart resumes where it was instead of replaying the
/// log from its start (docs/BRAIN.md, "Checkpoint"): the open runs, the coverage window and
/// tiles, each subject's latest observation. Little-endian, strings u16-length-prefixed,
/// every collection sorted, so the same state has one encoding.
mod state {
    use super::*;
    use sion_verify::wire::{Put as _, Reader, WireError};

    const VERSION: u8 = 1;

    fn put_box(out: &mut Vec<u8>, b: &BoxMm) {
        for v in b.min_mm.iter().chain(b.max_mm.iter()) {
            out.put_i64(*v);
        }
    }

    fn read_box(r: &mut Reader<'_>) -> Result<BoxMm, WireError> {
        let mut v = [0i64; 6];
        for x in v.iter_mut() {
            *x = r.i64("box")?;
        }
        Ok(BoxMm { min_mm: [v[0], v[1], v[2]], max_mm: [v[3], v[4], v[5]] })
    }

    fn list<T>(r: &mut Reader<'_>, field: &'static str, each: usize) -> Result<usize, WireError> {
        let n = r.u32(field)? as usize;
        if n.saturating_mul(each) > r.remaining() {
            return Err(WireError::Truncated(field));
        }
        let _ = std::marker::PhantomData::<T>;
        Ok(n)
    }

    impl Deriver {
        pub fn save(&self) -> Vec<u8> {
            let mut out = vec![VERSION];
            let mut runs: Vec<(&(String, String), &Run)> = self.runs.iter().collect();
            runs.sort_by(|a, b| a.0.cmp(b.0));
            out.put_u32(runs.len() as u32);
            for ((subject, frame), run) in runs {
                out.put_str16(subject);
                out.put_str16(frame);
                out.put_i64(run.window);
                out.put_u32(run.ids.len() as u32);
                for id in &run.ids {
                    out.put_bytes(&id.0);
                }
                put_box(&mut out, &run.bounds);
                out.put_i64(run.from_ns);
                out.put_i64(run.to_ns);
                out.put_u16(run.confidence);
            }
            match self.coverage_window {
                None => out.put_u8(0),
                Some(w) => {
                    out.put_u8(1);
                    out.put_i64(w);
                }
            }
            out.put_u32(self.tiles.len() as u32);
            for ((frame, tx, ty), (bounds, count)) in &self.tiles {
                out.put_str16(frame);
                out.put_i64(*tx);
                out.put_i64(*ty);
                put_box(&mut out, bounds);
                out.put_u64(*count);
            }
            let mut seen: Vec<(&String, &Seen)> = self.last_seen.iter().collect();
            seen.sort_by(|a, b| a.0.cmp(b.0));
            out.put_u32(seen.len() as u32);
            for (subject, s) in seen {
                out.put_str16(subject);
                out.put_bytes(&s.id.0);
                out.put_str16(&s.frame);
                put_box(&mut out, &s.bounds);
                out.put_i64(s.valid.from_ns);
                out.put_i64(s.valid.to_ns);
                out.put_u16(s.confidence);
            }
            out
        }

        /// A deriver from [`Deriver::save`]'s bytes; `None` if they are not such bytes.
        pub fn load(config: DeriveConfig, bytes: &[u8]) -> Option<Self> {
            Self::read(config, bytes).ok()
        }

        fn read(config: DeriveConfig, bytes: &[u8]) -> Result<Self, WireError> {
            let mut r = Reader::new(bytes);
            if r.u8("version")? != VERSION {
                return Err(WireError::Invalid { field: "version", problem: "unknown".into() });
            }
            let mut d = Deriver::new(config);
            for _ in 0..list::<Run>(&mut r, "runs", 4)? {
                let key = (r.str16("subject")?, r.str16("frame")?);
                let window = r.i64("window")?;
                let n = list::<AtomId>(&mut r, "ids", 32)?;
                let ids = (0..n).map(|_| Ok(AtomId(r.array("id")?))).collect::<Result<_, WireError>>()?;
                let bounds = read_box(&mut r)?;
                let (from_ns, to_ns, confidence) = (r.i64("from")?, r.i64("to")?, r.u16("confidence")?);
                d.runs.insert(key, Run { window, ids, bounds, from_ns, to_ns, confidence });
            }
            d.coverage_window = if r.flag("coverage window")? { Some(r.i64("window")?) } else { None };
            for _ in 0..list::<()>(&mut r, "tiles", 4)? {
                let key = (r.str16("frame")?, r.i64("tile x")?, r.i64("tile y")?);
                let bounds = read_box(&mut r)?;
                d.tiles.insert(key, (bounds, r.u64("count")?));
            }
            for _ in 0..list::<Seen>(&mut r, "seen", 4)? {
                let subject = r.str16("subject")?;
                let id = AtomId(r.array("id")?);
                let frame = r.str16("frame")?;
                let bounds = read_box(&mut r)?;
                let valid = Interval { from_ns: r.i64("from")?, to_ns: r.i64("to")? };
                let confidence = r.u16("confidence")?;
                d.last_seen.insert(subject, Seen { id, frame, bounds, valid, confidence });
            }
            r.finish()?;
            Ok(d)
        }
    }
}
