//! Service demand distributions, in milliseconds of one core's time.
//!
//! Spec grammar (flag `--demand`): `const:MS`, `exp:MEAN_MS`,
//! `lognormal:MEAN_MS:SIGMA`, `bimodal:SMALL_MS:LARGE_MS:P_LARGE`.

use rand::Rng;
use std::str::FromStr;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Demand {
    Const { ms: f64 },
    Exp { mean_ms: f64 },
    LogNormal { mean_ms: f64, sigma: f64 },
    Bimodal { small_ms: f64, large_ms: f64, p_large: f64 },
}

#[derive(Debug, thiserror::Error)]
#[error("demand `{spec}`: {reason} (expected const:MS, exp:MEAN_MS, lognormal:MEAN_MS:SIGMA or bimodal:SMALL_MS:LARGE_MS:P_LARGE)")]
pub struct DemandError {
    spec: String,
    reason: String,
}

impl FromStr for Demand {
    type Err = DemandError;
    fn from_str(spec: &str) -> Result<Self, DemandError> {
        let bad = |reason: &str| DemandError { spec: spec.to_string(), reason: reason.to_string() };
        let mut parts = spec.split(':');
        let kind = parts.next().unwrap_or("");
        let nums: Vec<f64> = parts
            .map(|p| p.parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0))
            .collect::<Option<_>>()
            .ok_or_else(|| bad("parameters must be non-negative numbers"))?;
        let d = match (kind, nums.as_slice()) {
            ("const", [ms]) => Demand::Const { ms: *ms },
            ("exp", [m]) => Demand::Exp { mean_ms: *m },
            ("lognormal", [m, s]) => Demand::LogNormal { mean_ms: *m, sigma: *s },
            ("bimodal", [a, b, p]) if *p <= 1.0 => Demand::Bimodal { small_ms: *a, large_ms: *b, p_large: *p },
            ("const" | "exp" | "lognormal" | "bimodal", _) => return Err(bad("wrong number of parameters")),
            _ => return Err(bad("unknown distribution")),
        };
        Ok(d)
    }
}

impl Demand {
    /// The mean demand, for reporting and for computing the offered load.
    pub fn mean_ms(&self) -> f64 {
        match *self {
            Demand::Const { ms } => ms,
            Demand::Exp { mean_ms } | Demand::LogNormal { mean_ms, .. } => mean_ms,
            Demand::Bimodal { small_ms, large_ms, p_large } => small_ms * (1.0 - p_large) + large_ms * p_large,
        }
    }

    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> Duration {
        let ms = match *self {
            Demand::Const { ms } => ms,
            Demand::Exp { mean_ms } => -mean_ms * (1.0 - rng.gen::<f64>()).ln(),
            Demand::LogNormal { mean_ms, sigma } => {
                // Box-Muller; mu chosen so that the mean is mean_ms.
                let (u1, u2): (f64, f64) = (1.0 - rng.gen::<f64>(), rng.gen());
                let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
                let mu = mean_ms.max(f64::MIN_POSITIVE).ln() - sigma * sigma / 2.0;
                (mu + sigma * z).exp()
            }
            Demand::Bimodal { small_ms, large_ms, p_large } => {
                if rng.gen::<f64>() < p_large {
                    large_ms
                } else {
                    small_ms
                }
            }
        };
        Duration::from_secs_f64(ms.max(0.0) / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::SmallRng, SeedableRng};

    #[test]
    fn parses_and_rejects() {
        assert_eq!("exp:100".parse::<Demand>().unwrap(), Demand::Exp { mean_ms: 100.0 });
        assert!("exp".parse::<Demand>().is_err());
        assert!("exp:-1".parse::<Demand>().is_err());
        assert!("uniform:1".parse::<Demand>().is_err());
        assert!("bimodal:1:2:1.5".parse::<Demand>().is_err());
    }

    #[test]
    fn sample_means_match() {
        let mut rng = SmallRng::seed_from_u64(7);
        for spec in ["const:5", "exp:100", "lognormal:50:1", "bimodal:5:200:0.1"] {
            let d: Demand = spec.parse().unwrap();
            let n = 200_000;
            let mean: f64 = (0..n).map(|_| d.sample(&mut rng).as_secs_f64() * 1000.0).sum::<f64>() / n as f64;
            let want = d.mean_ms();
            assert!((mean - want).abs() / want < 0.03, "{spec}: mean {mean} want {want}");
        }
    }
}
