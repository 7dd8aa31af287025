package main

import (
	"fmt"
	"image/color"
	"io"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// plotColumns is the width of the grid of panels.
const plotColumns = 2

// drawSoak writes one PNG of small multiples: a panel per soak metric,
// x in minutes since the load started, y in the metric's unit; over the
// second half, in red, the least-squares line the flatness verdict was
// drawn from; for capped metrics, judged by their bound, the bound, dashed.
func drawSoak(w io.Writer, title string, samples []sample, fs []flatness) error {
	rows := (len(soakMetrics) + plotColumns - 1) / plotColumns
	plots := make([][]*plot.Plot, rows)
	for r := range plots {
		plots[r] = make([]*plot.Plot, plotColumns)
	}
	for i, m := range soakMetrics {
		p := plot.New()
		p.Title.Text = m.column
		if i < len(fs) {
			verdict := "flat"
			if !fs[i].flat {
				verdict = "NOT FLAT"
			}
			p.Title.Text += " — " + verdict
		}
		p.X.Label.Text = "minutes"
		p.Y.Label.Text = m.unit
		if m.unit == "" {
			p.Y.Label.Text = "count"
		}
		pts := make(plotter.XYs, len(samples))
		for j, s := range samples {
			pts[j].X, pts[j].Y = s.at.Minutes(), s.values[i]/m.scale
		}
		p.Add(plotter.NewGrid())
		if len(pts) > 0 {
			line, err := plotter.NewLine(pts)
			if err != nil {
				return fmt.Errorf("plotting %s: %w", m.column, err)
			}
			p.Add(line)
		}
		if fit := fitPlot(samples, i, fs); fit != nil {
			p.Add(fit)
		}
		if bound := capPlot(samples, i, fs); bound != nil {
			p.Add(bound)
		}
		p.Y.Min = 0
		plots[i/plotColumns][i%plotColumns] = p
	}
	for r := range plots {
		for c := range plots[r] {
			if plots[r][c] == nil {
				plots[r][c] = plot.New()
				plots[r][c].HideAxes()
			}
		}
	}
	const width, panelHeight = 11 * vg.Inch, 3 * vg.Inch
	img := vgimg.New(width, panelHeight*vg.Length(rows)+0.4*vg.Inch)
	dc := draw.New(img)
	// The title across the top.
	top := draw.Crop(dc, 0, 0, 0, -0.4*vg.Inch)
	dc.FillText(draw.TextStyle{Color: color.Black, Font: font.From(plot.DefaultFont, 14), Handler: plot.DefaultTextHandler,
		XAlign: draw.XCenter, YAlign: draw.YBottom},
		vg.Point{X: dc.Center().X, Y: dc.Max.Y - 0.3*vg.Inch}, title)
	tiles := draw.Tiles{Rows: rows, Cols: plotColumns, PadX: vg.Inch / 4, PadY: vg.Inch / 4,
		PadTop: vg.Inch / 8, PadBottom: vg.Inch / 8, PadLeft: vg.Inch / 8, PadRight: vg.Inch / 4}
	canvases := plot.Align(plots, tiles, top)
	for r := range plots {
		for c := range plots[r] {
			plots[r][c].Draw(canvases[r][c])
		}
	}
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

// fitPlot is the second half's least-squares line of metric i, or nil.
func fitPlot(samples []sample, i int, fs []flatness) *plotter.Line {
	if i >= len(fs) || flatRules[i].capped || fs[i].warmSamples < minWarmSamples || len(samples) < 2 {
		return nil
	}
	ts, vs := secondHalf(samples, i)
	f := fitXY(ts, vs)
	scale := soakMetrics[i].scale
	at := func(t float64) plotter.XY { return plotter.XY{X: t, Y: (f.meanY + f.slope*(t-f.meanX)) / scale} }
	line, err := plotter.NewLine(plotter.XYs{at(ts[0]), at(ts[len(ts)-1])})
	if err != nil {
		return nil
	}
	line.Color = color.RGBA{R: 220, A: 255}
	line.Width = vg.Points(1.5)
	return line
}

// capPlot is the bound of a capped metric i across the run, or nil.
func capPlot(samples []sample, i int, fs []flatness) *plotter.Line {
	if i >= len(fs) || !flatRules[i].capped || fs[i].bound <= 0 || len(samples) < 2 {
		return nil
	}
	y := fs[i].bound / soakMetrics[i].scale
	line, err := plotter.NewLine(plotter.XYs{{X: samples[0].at.Minutes(), Y: y}, {X: samples[len(samples)-1].at.Minutes(), Y: y}})
	if err != nil {
		return nil
	}
	line.Color = color.RGBA{R: 220, A: 255}
	line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	return line
}
