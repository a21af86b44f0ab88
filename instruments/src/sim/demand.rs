//! Service demand: how much of one core a request needs.

use rand::Rng;
use std::fmt;
use std::str::FromStr;

/// The distribution of a request's demand, always with the configured mean.
///
/// Why a heavy tail: exponential jobs are what SRLB's paper measured, but real
/// services have a few requests far longer than the rest, and a balancer
/// that counts requests in flight (least-request, the tier) cannot see how long
/// each one is: a lognormal with sigma 1.5 puts 1% of the jobs above 11x the
/// mean and asks whether counting still tracks the work.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Demand {
    /// Exponential (the default; draws exactly as the simulator always has).
    Exp,
    /// Lognormal with this sigma (of the underlying normal), scaled to the mean.
    LogNormal { sigma: f64 },
}

impl Demand {
    /// One demand of mean `mean`.
    pub fn draw<R: Rng + ?Sized>(&self, rng: &mut R, mean: f64) -> f64 {
        match *self {
            Demand::Exp => exp(rng, mean),
            Demand::LogNormal { sigma } => {
                // Box-Muller, one normal per draw; E[exp(sigma Z)] = exp(sigma^2 / 2).
                let (u1, u2) = (1.0 - rng.gen::<f64>(), rng.gen::<f64>());
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                mean * (sigma * z - sigma * sigma / 2.0).exp()
            }
        }
    }
}

/// An exponential draw of mean `mean` (arrivals, and demands by default).
pub fn exp<R: Rng + ?Sized>(rng: &mut R, mean: f64) -> f64 {
    -mean * (1.0 - rng.gen::<f64>()).ln()
}

impl FromStr for Demand {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "exp" => Ok(Demand::Exp),
            _ => match s.strip_prefix("lognormal:") {
                Some(v) => match v.parse::<f64>() {
                    Ok(sigma) if sigma > 0.0 && sigma.is_finite() && sigma <= 5.0 => Ok(Demand::LogNormal { sigma }),
                    _ => Err(format!("lognormal:SIGMA: SIGMA must be a number above 0 and at most 5, not `{v}`")),
                },
                None => Err(format!("unknown demand `{s}` (expected exp or lognormal:SIGMA)")),
            },
        }
    }
}

impl fmt::Display for Demand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Demand::Exp => write!(f, "exp"),
            Demand::LogNormal { sigma } => write!(f, "lognormal:{sigma}"),
        }
    }
}
