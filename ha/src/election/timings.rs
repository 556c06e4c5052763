//! The three timings every Lease-based coordination here uses (leader election and shard rings),
//! with client-go's defaults: one type, so both configurations validate them the same way.

use std::time::Duration;

/// How long a Lease claim counts, how long its holder may go without renewing before it stops
/// acting, and how often it renews (and a rival retries).
///
/// The defaults are client-go's: 15 s, 10 s and 2 s. They must satisfy
/// `0 < retry_period < renew_deadline < lease_duration`: a holder that stops acting at the renew
/// deadline has done so before any rival may take its Lease over.
///
/// ```
/// use std::time::Duration;
/// use kubeapp_ha::election::LeaseTimings;
///
/// let quick = LeaseTimings::new(
///     Duration::from_secs(6),
///     Duration::from_secs(4),
///     Duration::from_secs(1),
/// );
/// assert!(quick.validate().is_ok());
/// assert!(LeaseTimings::default().validate().is_ok());
/// let inverted = LeaseTimings::new(
///     Duration::from_secs(4),
///     Duration::from_secs(6),
///     Duration::from_secs(1),
/// );
/// assert!(inverted.validate().unwrap_err().contains("renew deadline"));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseTimings {
    /// How long a claim counts for the others after its last renew (default 15 s).
    pub lease_duration: Duration,
    /// How long the holder may go without a successful renew before it stops acting (default
    /// 10 s, less than the lease duration).
    pub renew_deadline: Duration,
    /// How often the holder renews and a rival retries (default 2 s).
    pub retry_period: Duration,
}

impl Default for LeaseTimings {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl LeaseTimings {
    /// The three timings, in the order client-go names them.
    pub fn new(lease_duration: Duration, renew_deadline: Duration, retry_period: Duration) -> Self {
        Self {
            lease_duration,
            renew_deadline,
            retry_period,
        }
    }

    /// Checks `0 < retry_period < renew_deadline < lease_duration`.
    ///
    /// # Errors
    ///
    /// A sentence naming the timing at fault and the values given.
    pub fn validate(&self) -> Result<(), String> {
        if self.renew_deadline >= self.lease_duration {
            return Err(format!(
                "the renew deadline ({:?}) must be shorter than the lease duration ({:?})",
                self.renew_deadline, self.lease_duration
            ));
        }
        if self.retry_period >= self.renew_deadline || self.retry_period.is_zero() {
            return Err(format!(
                "the retry period ({:?}) must be positive and shorter than the renew deadline ({:?})",
                self.retry_period, self.renew_deadline
            ));
        }
        Ok(())
    }
}
