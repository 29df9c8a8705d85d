// Package ui holds sonde's status page: the HTML templates, the stylesheet,
// the script and the icon, embedded in the binary, and the HTTP headers
// that go with them. The pages are rendered by package server/status, which
// makes their data; the templates escape everything they show
// (html/template), and the script builds what it adds with textContent, so
// names and error texts from outside stay text. Nothing is loaded from elsewhere: the Content
// Security Policy allows the page's own origin only.
package ui

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"
)

//go:embed templates/*.html static/*
var files embed.FS

// ContentSecurityPolicy is sent with every page and asset: scripts, styles,
// images and connections from the page's own origin only, no inline script
// or style, no frames, no plugins, forms posting only to itself.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// SetHeaders sets the security headers of a page or asset.
func SetHeaders(h http.Header) {
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
}

// asset is one embedded static file.
type asset struct {
	body  []byte
	ctype string
	etag  string
}

var (
	assets  = map[string]*asset{}
	version string // hash of every asset: pages link assets with ?v=version
	pages   = map[string]*template.Template{}
)

func init() {
	all := sha256.New()
	names, err := fs.Glob(files, "static/*")
	if err != nil {
		panic(err)
	}
	for _, name := range names {
		b, err := files.ReadFile(name)
		if err != nil {
			panic(err)
		}
		sum := sha256.Sum256(b)
		all.Write(sum[:])
		ctype := mime.TypeByExtension(path.Ext(name))
		if ctype == "" {
			ctype = "application/octet-stream"
		}
		assets[path.Base(name)] = &asset{body: b, ctype: ctype, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
	}
	version = hex.EncodeToString(all.Sum(nil)[:6])

	base := template.Must(template.New("base").Funcs(funcs).ParseFS(files, "templates/base.html", "templates/parts.html"))
	pageFiles, err := fs.Glob(files, "templates/*.html")
	if err != nil {
		panic(err)
	}
	for _, f := range pageFiles {
		name := strings.TrimSuffix(path.Base(f), ".html")
		if name == "base" || name == "parts" {
			continue
		}
		pages[name] = template.Must(template.Must(base.Clone()).ParseFS(files, f))
	}
}

// Version identifies the embedded assets; it changes when any of them does.
func Version() string { return version }

// Render writes page name (a file of templates/ without .html) with data,
// through a buffer: a template error answers 500 instead of half a page.
func Render(w http.ResponseWriter, status int, name string, data any) {
	t, ok := pages[name]
	if !ok {
		http.Error(w, "no page "+name, http.StatusInternalServerError)
		return
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "base", data); err != nil {
		http.Error(w, fmt.Sprintf("render %s: %v", name, err), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	SetHeaders(h)
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w) // the client went away; nothing to do
}

// Static serves the embedded assets by file name (the request's path
// value "name"), with an ETag so a browser revalidates cheaply.
func Static(w http.ResponseWriter, r *http.Request) {
	a, ok := assets[r.PathValue("name")]
	if !ok {
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	SetHeaders(h)
	h.Set("Content-Type", a.ctype)
	h.Set("ETag", a.etag)
	if r.URL.Query().Get("v") == version {
		h.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		h.Set("Cache-Control", "no-cache")
	}
	if r.Header.Get("If-None-Match") == a.etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Length", strconv.Itoa(len(a.body)))
	_, _ = io.Copy(w, bytes.NewReader(a.body))
}

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"version": Version,
	"secs":    Seconds,
	"latency": Latency,
	"latencySecs": func(s float64) string {
		return Latency(time.Duration(s * float64(time.Second)))
	},
	"ago":   Ago,
	"clock": func(t time.Time) string { return t.UTC().Format("15:04:05") },
	"iso":   func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
	"join":  strings.Join,
	"add":   func(a, b int) int { return a + b },
}

// Seconds formats a number of seconds briefly: "450ms", "4s", "1m30s".
func Seconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d == 0:
		return "0s"
	case d < time.Second:
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'g', 3, 64) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'g', 3, 64) + "s"
	}
	return d.Round(time.Second).String()
}

// Latency formats a probe's latency with three significant digits, "" for
// none.
func Latency(d time.Duration) string {
	switch {
	case d <= 0:
		return ""
	case d < time.Millisecond:
		return strconv.FormatFloat(float64(d)/float64(time.Microsecond), 'g', 3, 64) + " µs"
	case d < time.Second:
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'g', 3, 64) + " ms"
	}
	return strconv.FormatFloat(d.Seconds(), 'g', 3, 64) + " s"
}

// Ago says how long before now t was: "12s", "3m", "2h5m", "4d".
func Ago(t, now time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		d = 0
		fallthrough
	case d < time.Minute:
		return strconv.Itoa(int(d/time.Second)) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	case d < 48*time.Hour:
		h, m := int(d/time.Hour), int(d%time.Hour/time.Minute)
		if m == 0 {
			return strconv.Itoa(h) + "h"
		}
		return fmt.Sprintf("%dh%dm", h, m)
	}
	return strconv.Itoa(int(d/(24*time.Hour))) + "d"
}

// WallClock says when t was, in UTC, as the pages do: its time of day, with
// the date when it is not today's, and how long ago.
func WallClock(t, now time.Time) string {
	t, now = t.UTC(), now.UTC()
	f := "15:04:05 UTC"
	if t.YearDay() != now.YearDay() || t.Year() != now.Year() {
		f = "2006-01-02 15:04:05 UTC"
	}
	return t.Format(f) + " (" + Ago(t, now) + " ago)"
}

// Count says n things: one when n is 1, else many with n for its %d.
func Count(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return fmt.Sprintf(many, n)
}
