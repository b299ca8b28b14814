//! `--plot out.svg`: admitted and refused requests over time and the
//! limiter's level, one panel per algorithm (plotters' SVG backend: text is
//! left to the viewer's fonts, so nothing is needed on this machine).

use std::path::Path;

use plotters::prelude::*;

use crate::CliError;
use crate::simulate::Outcome;

fn err(e: impl std::fmt::Display) -> CliError {
    CliError::new(format!("cannot draw the plot: {e}"))
}

/// Draws the outcomes into `path` (an `.svg` file).
pub fn svg(path: &Path, title: &str, outcomes: &[Outcome]) -> Result<(), CliError> {
    match path.extension().and_then(|e| e.to_str()) {
        Some(ext) if ext.eq_ignore_ascii_case("svg") => {}
        Some(ext) if ext.eq_ignore_ascii_case("png") => {
            return Err(CliError::new(
                "--plot: PNG needs fonts this build does not carry; write an .svg (any browser \
                 shows it, and converters such as rsvg-convert make a PNG of it)",
            ));
        }
        _ => {
            return Err(CliError::new(format!(
                "--plot {}: the file must end in .svg",
                path.display()
            )));
        }
    }
    let panels = outcomes.len().max(1);
    let height = u32::try_from(40 + 230 * panels).unwrap_or(u32::MAX);
    let root = SVGBackend::new(path, (1000, height)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (top, body) = root.split_vertically(40);
    top.draw(&Text::new(
        title.to_string(),
        (10, 10),
        ("sans-serif", 20).into_font(),
    ))
    .map_err(err)?;
    let areas = body.split_evenly((panels, 1));
    for (area, o) in areas.iter().zip(outcomes) {
        let width_s = o.bin_width as f64 / 1e9;
        let end = width_s * o.bins.len() as f64;
        let most = o
            .bins
            .iter()
            .map(|b| b.admitted.max(b.refused))
            .max()
            .unwrap_or(0)
            .max(1) as f64;
        let level_max = o.bins.iter().map(|b| b.level).max().unwrap_or(0).max(1) as f64;
        let caption = format!(
            "{} ({}): {} admitted, {} refused, at most {} in {:?}",
            o.algo.name(),
            if o.global {
                "one global limit"
            } else {
                "a limit per key"
            },
            o.admitted,
            o.refused,
            o.max_in_window,
            o.window
        );
        let mut chart = ChartBuilder::on(area)
            .caption(caption, ("sans-serif", 15))
            .margin(6)
            .x_label_area_size(28)
            .y_label_area_size(55)
            .right_y_label_area_size(55)
            .build_cartesian_2d(0f64..end, 0f64..most * 1.1)
            .map_err(err)?
            .set_secondary_coord(0f64..end, 0f64..level_max * 1.1);
        chart
            .configure_mesh()
            .x_desc("time (s)")
            .y_desc(format!("requests / {:.3} s", width_s))
            .draw()
            .map_err(err)?;
        chart
            .configure_secondary_axes()
            .y_desc("level: tokens or places left (blue)")
            .draw()
            .map_err(err)?;
        let at = |i: usize| i as f64 * width_s;
        chart
            .draw_series(
                AreaSeries::new(
                    o.bins
                        .iter()
                        .enumerate()
                        .map(|(i, b)| (at(i), b.admitted as f64)),
                    0.0,
                    GREEN.mix(0.35),
                )
                .border_style(GREEN),
            )
            .map_err(err)?
            .label("admitted")
            .legend(|(x, y)| Rectangle::new([(x, y - 4), (x + 14, y + 4)], GREEN.filled()));
        chart
            .draw_series(LineSeries::new(
                o.bins
                    .iter()
                    .enumerate()
                    .map(|(i, b)| (at(i), b.refused as f64)),
                RED.stroke_width(2),
            ))
            .map_err(err)?
            .label("refused")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 14, y)], RED.stroke_width(2)));
        chart
            .draw_secondary_series(LineSeries::new(
                o.bins
                    .iter()
                    .enumerate()
                    .map(|(i, b)| (at(i), b.level as f64)),
                BLUE,
            ))
            .map_err(err)?
            .label("level")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 14, y)], BLUE));
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK.mix(0.3))
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}
