//! A transform buffer: the frames tree from `/tf` and `/tf_static`, and the rigid transform
//! between any two frames at a time (interpolated between samples; never extrapolated beyond
//! a small tolerance, and not at all by [`TfBuffer::lookup_within`] with no reach). Names say
//! which way a transform maps: `map_from_camera` takes points in the camera frame to the map
//! frame.

use std::collections::{HashMap, VecDeque};

use nalgebra::{Isometry3, Quaternion, Translation3, UnitQuaternion};

use super::msgs::Transform;

/// Why a transform could not be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TfError {
    #[error("no transform connects frame {from:?} to frame {to:?}")]
    Unconnected { from: String, to: String },
    #[error("no transform from {frame:?} to its parent near that time (would extrapolate)")]
    NoSampleNear { frame: String },
    #[error("the transform of {frame:?} is not a rigid transform (bad rotation or translation)")]
    Invalid { frame: String },
}

#[derive(Debug, Clone)]
struct Edge {
    parent: String,
    /// Samples (time ns, parent_from_child), ordered by time; static edges hold one at time 0.
    samples: VecDeque<(i64, Isometry3<f64>)>,
    fixed: bool,
}

#[derive(Debug, Clone)]
pub struct TfBuffer {
    edges: HashMap<String, Edge>,
    /// How much history to keep per dynamic edge.
    history_ns: i64,
    /// How far outside its samples an edge may be used (nearest sample).
    tolerance_ns: i64,
}

impl Default for TfBuffer {
    fn default() -> Self {
        Self::new(10_000_000_000, 100_000_000)
    }
}

/// A ROS transform as an isometry, if it is one (finite, non-zero quaternion).
pub fn isometry(t: &Transform) -> Option<Isometry3<f64>> {
    let v = &t.translation;
    let q = &t.rotation;
    let all = [v.x, v.y, v.z, q.x, q.y, q.z, q.w];
    if all.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let norm = (q.x * q.x + q.y * q.y + q.z * q.z + q.w * q.w).sqrt();
    if !(0.5..=2.0).contains(&norm) {
        return None;
    }
    let rotation = UnitQuaternion::from_quaternion(Quaternion::new(q.w, q.x, q.y, q.z));
    Some(Isometry3::from_parts(Translation3::new(v.x, v.y, v.z), rotation))
}

impl TfBuffer {
    pub fn new(history_ns: i64, tolerance_ns: i64) -> Self {
        Self { edges: HashMap::new(), history_ns, tolerance_ns }
    }

    /// Add the transform `parent_from_child` at `time_ns` (static: valid at all times).
    pub fn insert(
        &mut self,
        parent: &str,
        child: &str,
        time_ns: i64,
        t: &Transform,
        fixed: bool,
    ) -> Result<(), TfError> {
        let iso = isometry(t).ok_or_else(|| TfError::Invalid { frame: child.to_owned() })?;
        let edge = self.edges.entry(child.to_owned()).or_insert_with(|| Edge {
            parent: parent.to_owned(),
            samples: VecDeque::new(),
            fixed,
        });
        if edge.parent != parent || edge.fixed != fixed || fixed {
            // A re-parented frame or a static transform replaces what was there.
            *edge = Edge { parent: parent.to_owned(), samples: VecDeque::new(), fixed };
        }
        let at = edge.samples.partition_point(|(t, _)| *t <= time_ns);
        if at > 0 && edge.samples.get(at - 1).is_some_and(|(t, _)| *t == time_ns) {
            // A second sample at a stamp already held is ignored, as tf2 does: the first
            // stands, so a lookup made before the repeat came gave what one made after gives.
            return Ok(());
        }
        edge.samples.insert(at, (time_ns, iso));
        if let Some(&(latest, _)) = edge.samples.back() {
            while edge.samples.len() > 2
                && edge.samples.front().is_some_and(|(t, _)| *t < latest - self.history_ns)
            {
                edge.samples.pop_front();
            }
        }
        Ok(())
    }

    pub fn knows(&self, frame: &str) -> bool {
        self.edges.contains_key(frame) || self.edges.values().any(|e| e.parent == frame)
    }

    fn parent_from_child_at(
        &self,
        child: &str,
        time_ns: i64,
        reach_ns: i64,
    ) -> Result<(&str, Isometry3<f64>), TfError> {
        let edge = self.edges.get(child).ok_or_else(|| TfError::NoSampleNear { frame: child.to_owned() })?;
        if edge.fixed {
            return edge
                .samples
                .front()
                .map(|(_, iso)| (edge.parent.as_str(), *iso))
                .ok_or(TfError::NoSampleNear { frame: child.to_owned() });
        }
        let i = edge.samples.partition_point(|(t, _)| *t <= time_ns);
        let before = i.checked_sub(1).and_then(|j| edge.samples.get(j));
        let after = edge.samples.get(i);
        let iso = match (before, after) {
            // A sample at the very time is used as it is, whether or not a later one has come
            // (slerp at 0 need not give back its first end bit for bit: a node that had the
            // next sample and a replay that had not would differ).
            (Some(&(t0, a)), _) if t0 == time_ns => a,
            (Some(&(t0, a)), Some(&(t1, b))) => {
                let s = (time_ns - t0) as f64 / (t1 - t0) as f64;
                a.lerp_slerp(&b, s)
            }
            (Some(&(t0, a)), None) if time_ns - t0 <= reach_ns => a,
            (None, Some(&(t1, b))) if t1 - time_ns <= reach_ns => b,
            _ => return Err(TfError::NoSampleNear { frame: child.to_owned() }),
        };
        Ok((edge.parent.as_str(), iso))
    }

    /// The chain from `frame` up to its root: (frame, root_from_frame) for every frame met.
    fn up(&self, frame: &str, time_ns: i64, reach_ns: i64) -> Result<Vec<(String, Isometry3<f64>)>, TfError> {
        let mut chain = vec![(frame.to_owned(), Isometry3::identity())];
        let mut at = frame.to_owned();
        let mut acc = Isometry3::identity();
        while self.edges.contains_key(&at) {
            let (parent, parent_from_at) = self.parent_from_child_at(&at, time_ns, reach_ns)?;
            acc = parent_from_at * acc;
            at = parent.to_owned();
            chain.push((at.clone(), acc));
            if chain.len() > 256 {
                break; // a cycle in what was published: stop rather than loop
            }
        }
        Ok(chain)
    }

    /// `target_from_source` at `time_ns`, an edge's nearest sample standing in for it up to the
    /// buffer's tolerance outside its samples (for drawing: a picture a little past the last
    /// transform is still placed).
    pub fn lookup(&self, target: &str, source: &str, time_ns: i64) -> Result<Isometry3<f64>, TfError> {
        self.lookup_within(target, source, time_ns, self.tolerance_ns)
    }

    /// `target_from_source` at `time_ns`, an edge's nearest sample standing in for it up to
    /// `reach_ns` outside its samples. With no reach, only a sample at the very time or two
    /// around it will do: the answer is then the same whatever order the samples came in,
    /// which a memory needs (a node that took a frame before its transform arrived and a
    /// replay that took them in the bag's order make the same atom).
    pub fn lookup_within(
        &self,
        target: &str,
        source: &str,
        time_ns: i64,
        reach_ns: i64,
    ) -> Result<Isometry3<f64>, TfError> {
        if target == source {
            return Ok(Isometry3::identity());
        }
        let from_source = self.up(source, time_ns, reach_ns)?;
        let from_target = self.up(target, time_ns, reach_ns)?;
        for (frame, ancestor_from_source) in &from_source {
            if let Some((_, ancestor_from_target)) = from_target.iter().find(|(f, _)| f == frame) {
                return Ok(ancestor_from_target.inverse() * ancestor_from_source);
            }
        }
        Err(TfError::Unconnected { from: source.to_owned(), to: target.to_owned() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msgs::{Quaternion as Q, Vector3};
    use nalgebra::Point3;

    fn t(x: f64, y: f64, z: f64, yaw: f64) -> Transform {
        let (s, c) = (yaw / 2.0).sin_cos();
        Transform { translation: Vector3 { x, y, z }, rotation: Q { x: 0.0, y: 0.0, z: s, w: c } }
    }

    #[test]
    fn chains_interpolates_and_refuses_to_extrapolate() {
        let mut tf = TfBuffer::new(10_000_000_000, 100_000_000);
        tf.insert("map", "odom", 0, &t(10.0, 0.0, 0.0, 0.0), true).expect("static");
        tf.insert("odom", "base_link", 1_000_000_000, &t(0.0, 0.0, 0.0, 0.0), false).expect("tf");
        tf.insert("odom", "base_link", 2_000_000_000, &t(2.0, 0.0, 0.0, 0.0), false).expect("tf");
        tf.insert("base_link", "camera", 0, &t(0.5, 0.0, 1.0, std::f64::consts::FRAC_PI_2), true)
            .expect("static");
        let map_from_camera = tf.lookup("map", "camera", 1_500_000_000).expect("lookup");
        let p = map_from_camera * Point3::new(1.0, 0.0, 0.0);
        // Camera 0.5 m ahead of the base at x = 1 (halfway), odom 10 m along: 11.5 m; the
        // camera's x axis points along the map's y.
        assert!((p.x - 11.5).abs() < 1e-9 && (p.y - 1.0).abs() < 1e-9 && (p.z - 1.0).abs() < 1e-9, "{p}");
        let camera_from_map = tf.lookup("camera", "map", 1_500_000_000).expect("inverse");
        let back = camera_from_map * p;
        assert!((back - Point3::new(1.0, 0.0, 0.0)).norm() < 1e-9);
        assert!(matches!(tf.lookup("map", "camera", 5_000_000_000), Err(TfError::NoSampleNear { .. })));
        assert!(matches!(tf.lookup("map", "nowhere", 1_500_000_000), Err(TfError::Unconnected { .. })));
        let bad = Transform { translation: Vector3 { x: f64::NAN, y: 0.0, z: 0.0 }, rotation: Q::default() };
        assert!(tf.insert("map", "x", 0, &bad, false).is_err());
        let zero =
            Transform { translation: Vector3::default(), rotation: Q { x: 0.0, y: 0.0, z: 0.0, w: 0.0 } };
        assert!(tf.insert("map", "x", 0, &zero, false).is_err());
    }

    #[test]
    fn a_repeated_stamp_keeps_the_first_sample() {
        let mut tf = TfBuffer::new(10_000_000_000, 0);
        tf.insert("odom", "base_link", 1_000, &t(1.0, 0.0, 0.0, 0.0), false).expect("tf");
        tf.insert("odom", "base_link", 1_000, &t(5.0, 0.0, 0.0, 0.0), false).expect("repeat");
        let at = tf.lookup("odom", "base_link", 1_000).expect("lookup") * Point3::origin();
        assert_eq!(at, Point3::new(1.0, 0.0, 0.0));
    }
}
