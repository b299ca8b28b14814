//! `--plot out.svg` or `--plot out.png`: admitted and refused requests over
//! time and the limiter's level, one panel per algorithm. plotters draws an
//! SVG (its text left to the viewer's fonts); for a `.png` resvg renders that
//! SVG, its text in DejaVu Sans embedded in the binary (`fonts/`, licence
//! beside it), so no font on the machine is needed or read.

use std::path::Path;
use std::sync::Arc;

use plotters::chart::DualCoordChartContext;
use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use resvg::{tiny_skia, usvg};

use crate::CliError;
use crate::server::{Run, Server};
use crate::simulate::{Bin, Outcome};

/// The typeface every text of a PNG chart is drawn in (DejaVu Sans 2.37,
/// unmodified; `fonts/LICENSE-DejaVu`).
const FONT: &[u8] = include_bytes!("../fonts/DejaVuSans.ttf");
/// The family name inside [`FONT`].
const FONT_FAMILY: &str = "DejaVu Sans";

fn err(e: impl std::fmt::Display) -> CliError {
    CliError::new(format!("cannot draw the plot: {e}"))
}

/// A part of a chart's SVG page.
type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// A white SVG page into `doc`, 1000 pixels wide: a band `band.0` pixels
/// high with `title` at `band.1` from its top, then `panels` (at least one)
/// panels 230 pixels high. Returns the page (to present), the band and the
/// panels.
fn page<'a>(
    doc: &'a mut String,
    title: &str,
    band: (u32, i32),
    panels: usize,
) -> Result<(Area<'a>, Area<'a>, Vec<Area<'a>>), CliError> {
    let panels = panels.max(1);
    let height = u32::try_from(band.0 as usize + 230 * panels).unwrap_or(u32::MAX);
    let root = SVGBackend::with_string(doc, (1000, height)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (top, body) = root.split_vertically(band.0);
    top.draw(&Text::new(
        title.to_string(),
        (10, band.1),
        ("sans-serif", 20).into_font(),
    ))
    .map_err(err)?;
    let areas = body.split_evenly((panels, 1));
    Ok((root, top, areas))
}

/// A panel's coordinates: seconds across, a value up.
type Axes = Cartesian2d<RangedCoordf64, RangedCoordf64>;

/// One panel's chart, its mesh and both axes drawn: `x` is the end of its
/// time axis and that axis' description; `left` the width of the left
/// axis' labels in pixels, its largest value and its description; `right`
/// the same for the right axis (labels 55 pixels wide). Each axis runs
/// from 0 to a tenth above its largest value.
fn panel<'a>(
    area: &Area<'a>,
    caption: String,
    (end, x_desc): (f64, &str),
    (left_width, left_max, left_desc): (u32, f64, &str),
    (right_max, right_desc): (f64, &str),
) -> Result<DualCoordChartContext<'a, SVGBackend<'a>, Axes, Axes>, CliError> {
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 15))
        .margin(6)
        .x_label_area_size(28)
        .y_label_area_size(left_width)
        .right_y_label_area_size(55)
        .build_cartesian_2d(0f64..end, 0f64..left_max * 1.1)
        .map_err(err)?
        .set_secondary_coord(0f64..end, 0f64..right_max * 1.1);
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(left_desc)
        .draw()
        .map_err(err)?;
    chart
        .configure_secondary_axes()
        .y_desc(right_desc)
        .draw()
        .map_err(err)?;
    Ok(chart)
}

/// What a chart is written as, from the extension of its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Svg,
    Png,
}

/// The chart's format, from `path`'s extension (`.svg` or `.png`, any
/// case); anything else is refused, naming the path.
fn format_of(path: &Path) -> Result<Format, CliError> {
    match path.extension().and_then(|e| e.to_str()) {
        Some(ext) if ext.eq_ignore_ascii_case("svg") => Ok(Format::Svg),
        Some(ext) if ext.eq_ignore_ascii_case("png") => Ok(Format::Png),
        _ => Err(CliError::new(format!(
            "--plot {}: the file must end in .svg or .png",
            path.display()
        ))),
    }
}

/// Renders an SVG document into PNG bytes at its own size (one pixel per
/// SVG unit), its text in the embedded font whatever family it names.
fn render_png(svg: &str) -> Result<Vec<u8>, CliError> {
    let mut fonts = usvg::fontdb::Database::new();
    fonts.load_font_data(FONT.to_vec());
    fonts.set_sans_serif_family(FONT_FAMILY);
    fonts.set_serif_family(FONT_FAMILY);
    fonts.set_monospace_family(FONT_FAMILY);
    let options = usvg::Options {
        font_family: FONT_FAMILY.to_string(),
        fontdb: Arc::new(fonts),
        ..usvg::Options::default()
    };
    let tree = usvg::Tree::from_str(svg, &options).map_err(err)?;
    let size = tree.size().to_int_size();
    let mut pixmap = tiny_skia::Pixmap::new(size.width(), size.height()).ok_or_else(|| {
        err(format!(
            "a {}x{} image is too large",
            size.width(),
            size.height()
        ))
    })?;
    resvg::render(&tree, tiny_skia::Transform::default(), &mut pixmap.as_mut());
    pixmap.encode_png().map_err(err)
}

/// Writes the drawn SVG document to `path`, as it is or as a PNG.
fn write(path: &Path, format: Format, svg: &str) -> Result<(), CliError> {
    let bytes = match format {
        Format::Svg => svg.as_bytes().to_vec(),
        Format::Png => render_png(svg)?,
    };
    std::fs::write(path, bytes)
        .map_err(|e| CliError::new(format!("cannot write the plot {}: {e}", path.display())))
}

/// Draws the outcomes into `path` (an `.svg` or `.png` file).
pub fn svg(path: &Path, title: &str, outcomes: &[Outcome]) -> Result<(), CliError> {
    let format = format_of(path)?;
    let mut doc = String::new();
    draw_outcomes(&mut doc, title, outcomes)?;
    write(path, format, &doc)
}

/// Draws the outcomes as an SVG document into `doc`.
fn draw_outcomes(doc: &mut String, title: &str, outcomes: &[Outcome]) -> Result<(), CliError> {
    let (root, _, areas) = page(doc, title, (40, 10), outcomes.len())?;
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
        let mut chart = panel(
            area,
            caption,
            (end, "time (s)"),
            (55, most, &format!("requests / {:.3} s", width_s)),
            (level_max, "level: tokens or places left (blue)"),
        )?;
        // One count of each bin, at the bin's start.
        let points = |count: fn(&Bin) -> u64| {
            let bins = o.bins.iter().enumerate();
            bins.map(move |(i, b)| (i as f64 * width_s, count(b) as f64))
        };
        chart
            .draw_series(
                AreaSeries::new(points(|b| b.admitted), 0.0, GREEN.mix(0.35)).border_style(GREEN),
            )
            .map_err(err)?
            .label("admitted")
            .legend(|(x, y)| Rectangle::new([(x, y - 4), (x + 14, y + 4)], GREEN.filled()));
        chart
            .draw_series(LineSeries::new(points(|b| b.refused), RED.stroke_width(2)))
            .map_err(err)?
            .label("refused")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 14, y)], RED.stroke_width(2)));
        chart
            .draw_secondary_series(LineSeries::new(points(|b| b.level), BLUE))
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

/// Draws the server model's runs into `path` (an `.svg` or `.png` file):
/// per variant, the latency p99 of the requests arriving in each time bin
/// (red, with 3× the service time in grey), and the requests in flight
/// (grey) and the limit (blue) on the right axis.
pub fn server_svg(path: &Path, title: &str, server: &Server, runs: &[Run]) -> Result<(), CliError> {
    let format = format_of(path)?;
    let mut doc = String::new();
    draw_runs(&mut doc, title, server, runs)?;
    write(path, format, &doc)
}

/// Draws the server model's runs as an SVG document into `doc`.
fn draw_runs(doc: &mut String, title: &str, server: &Server, runs: &[Run]) -> Result<(), CliError> {
    let (root, top, areas) = page(doc, title, (62, 8), runs.len())?;
    top.draw(&Text::new(
        "red: latency p99 of the requests arriving then (left axis; light grey: 3x the service \
         time); blue: the limit, grey: requests in flight (right axis)",
        (10, 38),
        ("sans-serif", 13).into_font(),
    ))
    .map_err(err)?;
    let bound_ms = 3.0 * server.service as f64 / 1e6;
    for (area, r) in areas.iter().zip(runs) {
        let width_s = r.bin_width as f64 / 1e9;
        let end = width_s * r.bins.len() as f64;
        let ms = |n: u64| n as f64 / 1e6;
        let p99_max = r
            .bins
            .iter()
            .filter_map(|b| b.p99)
            .map(ms)
            .fold(bound_ms, f64::max);
        let right_max = r
            .bins
            .iter()
            .map(|b| b.in_flight.max(b.limit.unwrap_or(0) as u64))
            .max()
            .unwrap_or(0)
            .max(1) as f64;
        let show = |n: Option<u64>| n.map_or("-".to_string(), |n| format!("{:.1} ms", ms(n)));
        let caption = format!(
            "{}: {} admitted, {} shed, {:.1}/s served, p50 {}, p99 {}",
            r.name,
            r.admitted,
            r.shed,
            r.goodput(),
            show(r.p50),
            show(r.p99)
        );
        let mut chart = panel(
            area,
            caption,
            (end, "arrival time (s)"),
            (60, p99_max, "latency p99 (ms, red)"),
            (right_max, "limit (blue), in flight (grey)"),
        )?;
        let mid = |i: usize| (i as f64 + 0.5) * width_s;
        chart
            .draw_series(LineSeries::new(
                [(0.0, bound_ms), (end, bound_ms)],
                BLACK.mix(0.35).stroke_width(2),
            ))
            .map_err(err)?;
        chart
            .draw_series(LineSeries::new(
                r.bins
                    .iter()
                    .enumerate()
                    .filter_map(|(i, b)| b.p99.map(|p| (mid(i), ms(p)))),
                RED.stroke_width(2),
            ))
            .map_err(err)?;
        chart
            .draw_secondary_series(LineSeries::new(
                r.bins
                    .iter()
                    .enumerate()
                    .map(|(i, b)| ((i + 1) as f64 * width_s, b.in_flight as f64)),
                BLACK.mix(0.5),
            ))
            .map_err(err)?;
        if !r.limits.is_empty() {
            // A step line through every move of the limit.
            let mut steps = Vec::with_capacity(2 * r.limits.len() + 1);
            for (k, &(t, l)) in r.limits.iter().enumerate() {
                let t = (t as f64 / 1e9).min(end);
                if k > 0 {
                    steps.push((t, r.limits[k - 1].1 as f64));
                }
                steps.push((t, l as f64));
            }
            if let Some(&(_, l)) = r.limits.last() {
                steps.push((end, l as f64));
            }
            chart
                .draw_secondary_series(LineSeries::new(steps, BLUE.stroke_width(2)))
                .map_err(err)?;
        }
    }
    root.present().map_err(err)?;
    Ok(())
}
