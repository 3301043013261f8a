//! A deterministic warehouse: robots driving the aisles of a 1 km × 1 km × 30 m building,
//! recording their poses, seeing pallets (which move between visits) and mapping tiles.
//!
//! It feeds the demo, the tests and the benchmarks with atoms shaped like a robot's: the same
//! seed gives the same atoms, byte for byte, on every machine.

#![forbid(unsafe_code)]

use std::collections::HashMap;

use sion_verify::atom::{Atom, AtomParts, BlobRef, BoxMm, Extractor, Interval, Kind, Payload, Permille};

/// SplitMix64: tiny, fast and good enough to place pallets; not for secrets.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi)`; `lo < hi`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        let span = hi.abs_diff(lo);
        lo.wrapping_add((self.next_u64() % span) as i64)
    }

    /// True with probability `permille / 1000`.
    pub fn chance(&mut self, permille: u64) -> bool {
        self.next_u64() % 1000 < permille
    }
}

#[derive(Debug, Clone)]
pub struct WarehouseConfig {
    pub seed: u64,
    pub robots: usize,
    pub pallets: usize,
    /// Building size in millimetres.
    pub size_mm: [i64; 3],
    /// Valid time of the first tick (nanoseconds).
    pub start_ns: i64,
    /// Time between ticks (nanoseconds).
    pub tick_ns: i64,
}

impl Default for WarehouseConfig {
    fn default() -> Self {
        Self {
            seed: 7,
            robots: 4,
            pallets: 2_000,
            size_mm: [1_000_000, 1_000_000, 30_000],
            // 2026-01-01T00:00:00Z
            start_ns: 1_767_225_600_000_000_000,
            tick_ns: 1_000_000_000,
        }
    }
}

#[derive(Debug, Clone)]
struct Robot {
    name: String,
    at_mm: [i64; 3],
    goal_mm: [i64; 3],
}

/// Atoms of a warehouse run, tick after tick, forever (take as many as you need).
#[derive(Debug, Clone)]
pub struct Warehouse {
    cfg: WarehouseConfig,
    rng: SplitMix64,
    robots: Vec<Robot>,
    pallets_mm: Vec<[i64; 3]>,
    /// Pallets by 10 m cell, so a robot looks only at the cells around it.
    grid: HashMap<(i64, i64), Vec<usize>>,
    tick: i64,
    queue: std::collections::VecDeque<Atom>,
}

const SPEED_MM_PER_TICK: i64 = 1_500;
const SIGHT_MM: i64 = 8_000;
const PALLET_MM: [i64; 3] = [1_200, 1_000, 1_500];
const TILE_MM: i64 = 10_000;

impl Warehouse {
    pub fn new(cfg: WarehouseConfig) -> Self {
        let mut rng = SplitMix64::new(cfg.seed);
        let [sx, sy, _] = cfg.size_mm;
        let pallets_mm: Vec<[i64; 3]> = (0..cfg.pallets)
            .map(|_| [rng.range(0, sx - PALLET_MM[0]), rng.range(0, sy - PALLET_MM[1]), 0])
            .collect();
        let mut grid: HashMap<(i64, i64), Vec<usize>> = HashMap::new();
        for (p, q) in pallets_mm.iter().enumerate() {
            grid.entry(cell(*q)).or_default().push(p);
        }
        let robots = (0..cfg.robots)
            .map(|i| {
                let at_mm = [rng.range(0, sx), rng.range(0, sy), 0];
                Robot { name: format!("robot-{i}"), at_mm, goal_mm: at_mm }
            })
            .collect();
        Self { cfg, rng, robots, pallets_mm, grid, tick: 0, queue: Default::default() }
    }

    fn step(&mut self) {
        let t0 = self.cfg.start_ns.saturating_add(self.tick.saturating_mul(self.cfg.tick_ns));
        let valid = Interval { from_ns: t0, to_ns: t0.saturating_add(self.cfg.tick_ns) };
        let [sx, sy, _] = self.cfg.size_mm;
        for r in 0..self.robots.len() {
            let robot = &mut self.robots[r];
            if robot.at_mm == robot.goal_mm {
                // Aisles run along x every 10 m: drive to a random spot on one.
                robot.goal_mm = [self.rng.range(0, sx), self.rng.range(0, sy / 10_000) * 10_000, 0];
            }
            for axis in 0..2 {
                let d =
                    (robot.goal_mm[axis] - robot.at_mm[axis]).clamp(-SPEED_MM_PER_TICK, SPEED_MM_PER_TICK);
                robot.at_mm[axis] += d;
            }
            let at = robot.at_mm;
            let name = robot.name.clone();
            let mut pose = AtomParts::new(Kind::Pose, "map", BoxMm::point(at), valid, Permille(990));
            pose.subject = name.clone();
            self.push(pose);

            // Pallets in sight are observed; now and then one has moved since last time.
            let (cx, cy) = cell(at);
            let mut seen: Vec<usize> = (cx - 1..=cx + 1)
                .flat_map(|x| (cy - 1..=cy + 1).map(move |y| (x, y)))
                .filter_map(|c| self.grid.get(&c))
                .flatten()
                .copied()
                .filter(|&p| {
                    let q = self.pallets_mm[p];
                    (q[0] - at[0]).abs() < SIGHT_MM && (q[1] - at[1]).abs() < SIGHT_MM
                })
                .collect();
            seen.sort_unstable();
            seen.truncate(3);
            let pose_id = self.queue.back().map(Atom::id);
            for p in seen {
                if self.rng.chance(20) {
                    let moved =
                        [self.rng.range(0, sx - PALLET_MM[0]), self.rng.range(0, sy - PALLET_MM[1]), 0];
                    if let Some(in_cell) = self.grid.get_mut(&cell(self.pallets_mm[p])) {
                        in_cell.retain(|&other| other != p);
                    }
                    self.grid.entry(cell(moved)).or_default().push(p);
                    self.pallets_mm[p] = moved;
                }
                let q = self.pallets_mm[p];
                let bounds =
                    BoxMm { min_mm: q, max_mm: [q[0] + PALLET_MM[0], q[1] + PALLET_MM[1], PALLET_MM[2]] };
                let confidence = Permille(700 + (self.rng.next_u64() % 300) as u16);
                let mut obs = AtomParts::new(Kind::Observation, "map", bounds, valid, confidence);
                obs.subject = format!("pallet-{p}");
                obs.extractor = Some(Extractor { model: "pallet-detector-v3".into(), code: name.clone() });
                // Seen from the pose just recorded.
                obs.sources.extend(pose_id);
                let mut frame_hash = [0u8; 32];
                for chunk in frame_hash.chunks_mut(8) {
                    chunk.copy_from_slice(&self.rng.next_u64().to_le_bytes());
                }
                obs.payload = Payload::Blob(BlobRef {
                    hash: frame_hash,
                    size: 48_000 + self.rng.next_u64() % 4_000,
                    media_type: "image/jpeg".into(),
                });
                self.push(obs);
            }
            if self.tick % 30 == 0 {
                let tile = [at[0] / TILE_MM * TILE_MM, at[1] / TILE_MM * TILE_MM, 0];
                let bounds = BoxMm { min_mm: tile, max_mm: [tile[0] + TILE_MM, tile[1] + TILE_MM, 0] };
                let mut map_tile = AtomParts::new(
                    Kind::MapTile,
                    "map",
                    bounds,
                    Interval { from_ns: t0, to_ns: Interval::OPEN_END_NS },
                    Permille(950),
                );
                map_tile.subject = format!("tile-{}-{}", tile[0] / TILE_MM, tile[1] / TILE_MM);
                let mut hash = [0u8; 32];
                hash[..8].copy_from_slice(&self.rng.next_u64().to_le_bytes());
                map_tile.payload = Payload::Blob(BlobRef {
                    hash,
                    size: 10_000,
                    media_type: "application/x-occupancy-grid".into(),
                });
                self.push(map_tile);
            }
        }
        self.tick += 1;
    }

    fn push(&mut self, parts: AtomParts) {
        // The simulation stays inside the limits, so this only fails on a bug here; skipping
        // keeps a bug from taking down a demo.
        if let Ok(atom) = Atom::new(parts) {
            self.queue.push_back(atom);
        }
    }
}

fn cell(p_mm: [i64; 3]) -> (i64, i64) {
    (p_mm[0].div_euclid(10_000), p_mm[1].div_euclid(10_000))
}

impl Iterator for Warehouse {
    type Item = Atom;

    fn next(&mut self) -> Option<Atom> {
        while self.queue.is_empty() {
            self.step();
        }
        self.queue.pop_front()
    }
}

/// The workload of the seed's proof-size table: a 1 km × 1 km × 30 m warehouse over 30 days,
/// `n` atoms recorded in time order (with a little jitter, so some arrive late):
/// 60 % pallet observations (1.2 × 1.0 × 1.5 m on rack levels, seen for 1–120 s), 30 % robot
/// poses (0.8 × 0.8 × 1.5 m, 1 s), 9.4 % coverage patches (6 × 6 × 3 m, 1–3 min) and 0.6 %
/// 3-D map tiles (10 × 10 × 3 m voxel blocks at rack levels, valid until further notice).
/// Positions are uniform. The mix is tuned so that the seed's four queries find about as many
/// atoms as the seed reports.
#[derive(Debug, Clone)]
pub struct MonthInAWarehouse {
    rng: SplitMix64,
    n: u64,
    i: u64,
    start_ns: i64,
    span_ns: i64,
}

/// 30 days in nanoseconds.
pub const MONTH_NS: i64 = 30 * 24 * 3_600 * 1_000_000_000;
/// The warehouse: 1 km × 1 km × 30 m, in millimetres.
pub const WAREHOUSE_MM: [i64; 3] = [1_000_000, 1_000_000, 30_000];

impl MonthInAWarehouse {
    pub fn new(n: u64, seed: u64) -> Self {
        Self::over(n, seed, MONTH_NS)
    }

    /// `n` atoms over `span_ns` instead of a month: the seed's density of atoms per hour and
    /// per square metre over a longer life is `over(n, seed, MONTH_NS * n / 10^6)`.
    pub fn over(n: u64, seed: u64, span_ns: i64) -> Self {
        Self { rng: SplitMix64::new(seed), n, i: 0, start_ns: WarehouseConfig::default().start_ns, span_ns }
    }

    /// The same, starting at `start_ns` rather than the first of January 2026.
    pub fn starting_at(mut self, start_ns: i64) -> Self {
        self.start_ns = start_ns;
        self
    }

    pub fn start_ns(&self) -> i64 {
        self.start_ns
    }
}

impl Iterator for MonthInAWarehouse {
    type Item = Atom;

    fn next(&mut self) -> Option<Atom> {
        if self.i >= self.n {
            return None;
        }
        let rng = &mut self.rng;
        let i = self.i;
        self.i += 1;
        let slot = self.span_ns / self.n as i64;
        let jitter =
            rng.range(0, slot.max(1)) - if rng.chance(10) { rng.range(0, 600_000_000_000) } else { 0 };
        let t = (self.start_ns + i as i64 * slot + jitter).max(self.start_ns);
        let at = |rng: &mut SplitMix64, size: [i64; 3]| {
            let min = [
                rng.range(0, WAREHOUSE_MM[0] - size[0]),
                rng.range(0, WAREHOUSE_MM[1] - size[1]),
                rng.range(0, (WAREHOUSE_MM[2] - size[2]) / 1_500) * 1_500,
            ];
            BoxMm { min_mm: min, max_mm: [min[0] + size[0], min[1] + size[1], min[2] + size[2]] }
        };
        let roll = rng.next_u64() % 1000;
        let parts = if roll < 600 {
            let mut p = AtomParts::new(
                Kind::Observation,
                "map",
                at(rng, [1_200, 1_000, 1_500]),
                Interval { from_ns: t, to_ns: t + rng.range(1, 121) * 1_000_000_000 },
                Permille(600 + (rng.next_u64() % 400) as u16),
            );
            p.subject = format!("pallet-{}", rng.next_u64() % 20_000);
            p.extractor =
                Some(Extractor { model: "pallet-detector-v3".into(), code: "sion_memory 0.1".into() });
            p
        } else if roll < 900 {
            let mut bounds = at(rng, [800, 800, 1_500]);
            bounds.min_mm[2] = 0;
            bounds.max_mm[2] = 1_500;
            let mut p = AtomParts::new(
                Kind::Pose,
                "map",
                bounds,
                Interval { from_ns: t, to_ns: t + 1_000_000_000 },
                Permille(990),
            );
            p.subject = format!("robot-{}", rng.next_u64() % 8);
            p
        } else if roll < 994 {
            AtomParts::new(
                Kind::Coverage,
                "map",
                at(rng, [6_000, 6_000, 3_000]),
                Interval { from_ns: t, to_ns: t + rng.range(60, 181) * 1_000_000_000 },
                Permille(900),
            )
        } else {
            let bounds = at(rng, [10_000, 10_000, 3_000]);
            let mut p = AtomParts::new(
                Kind::MapTile,
                "map",
                bounds,
                // Until further notice, in the seed's month; over a longer life the warehouse
                // is mapped again each month, so a tile holds for a month.
                Interval {
                    from_ns: t,
                    to_ns: if self.span_ns > MONTH_NS { t + MONTH_NS } else { Interval::OPEN_END_NS },
                },
                Permille(950),
            );
            p.subject = format!(
                "tile-{}-{}-{}",
                bounds.min_mm[0] / 10_000,
                bounds.min_mm[1] / 10_000,
                bounds.min_mm[2] / 3_000
            );
            p
        };
        Atom::new(parts).ok()
    }
}
