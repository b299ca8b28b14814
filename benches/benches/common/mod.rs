//! The criterion settings of the bench files: `samples` samples a row,
//! each row warmed up for `warm_up` then measured for `measurement`, no
//! plots.

use std::time::Duration;

use criterion::Criterion;

pub fn config(samples: usize, warm_up: Duration, measurement: Duration) -> Criterion {
    Criterion::default()
        .sample_size(samples)
        .warm_up_time(warm_up)
        .measurement_time(measurement)
        .without_plots()
}
