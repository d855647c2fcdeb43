// Package httpapi is gend's REST API and /metrics on chi. Handlers are thin:
// limit the body, decode strictly, validate, call the Service, encode.
package httpapi

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/gend-dev/gend/api"
	"github.com/gend-dev/gend/internal/spec"
)

// MaxBodyBytes limits request bodies (job specs are small; inputs are files).
const MaxBodyBytes = 1 << 20

// Service is what the API calls; the daemon implements it. Errors of type
// *api.Error carry their status; anything else is a 500.
type Service interface {
	SubmitJob(ctx context.Context, raw []byte) (api.Job, error)
	Jobs() []api.Job
	Job(id string) (api.Job, error)
	PauseJob(id string) (api.Job, error)
	ResumeJob(id string) (api.Job, error)
	CancelJob(id string) (api.Job, error)
	ResizeJob(id string, r api.ResizeRequest) (api.Job, error)
	ETA(id string) (api.ETA, error) // "" = the current job
	Servers() []api.Server
	AddServer(s api.ServerSpec) (api.Server, error)
	RemoveServer(name string) error
	GPUs() api.GPUs
	Diagnosis() api.Diagnosis
	Ready() error
}

// Options configure the router.
type Options struct {
	Token    string // bearer token for non-GET requests ("" = none)
	Registry *prometheus.Registry
	Gatherer prometheus.Gatherer
	Logger   zerolog.Logger
}

type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// New returns the API handler.
func New(svc Service, opts Options) http.Handler {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gend_http_requests_total",
			Help: "API requests by route pattern, method and status code."}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gend_http_request_duration_seconds",
			Help: "API request latency by route pattern.", Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8)}, []string{"route"}),
	}
	if opts.Registry != nil {
		opts.Registry.MustRegister(m.requests, m.duration)
	}
	h := &handlers{svc: svc, log: opts.Logger}
	r := chi.NewRouter()
	r.Use(m.middleware, recoverer(opts.Logger), auth(opts.Token))
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) { writeText(w, http.StatusOK, "ok\n") })
	r.Get("/readyz", h.ready)
	if opts.Gatherer != nil {
		r.Handle("/metrics", promhttp.HandlerFor(opts.Gatherer, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	}
	r.Route("/v1", func(r chi.Router) {
		r.Post("/jobs", h.submit)
		r.Get("/jobs", h.list)
		r.Get("/jobs/{id}", h.get)
		r.Post("/jobs/{id}/pause", h.action(svc.PauseJob))
		r.Post("/jobs/{id}/resume", h.action(svc.ResumeJob))
		r.Post("/jobs/{id}/cancel", h.action(svc.CancelJob))
		r.Post("/jobs/{id}/resize", h.resize)
		r.Get("/jobs/{id}/eta", h.eta)
		r.Get("/eta", h.eta)
		r.Get("/servers", h.servers)
		r.Post("/servers", h.addServer)
		r.Delete("/servers/{name}", h.removeServer)
		r.Get("/gpus", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, svc.GPUs()) })
		r.Get("/diagnosis", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, svc.Diagnosis()) })
	})
	r.NotFound(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, &api.Error{Status: http.StatusNotFound, Code: "not_found", Message: "no such route"})
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, &api.Error{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed", Message: "method not allowed on this route"})
	})
	return r
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(c int) { s.code = c; s.ResponseWriter.WriteHeader(c) }

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (m *metrics) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(sw, r)
		route := "unmatched"
		if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
			route = rc.RoutePattern()
		}
		m.requests.WithLabelValues(route, r.Method, strconv.Itoa(sw.code)).Inc()
		m.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
	})
}

func recoverer(log zerolog.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				if v := recover(); v != nil {
					if v == http.ErrAbortHandler {
						panic(v)
					}
					log.Error().Interface("panic", v).Str("path", r.URL.Path).Msg("handler panic")
					writeError(w, &api.Error{Status: 500, Code: "internal", Message: "internal error"})
				}
			}()
			next.ServeHTTP(w, r)
		})
	}
}

// auth requires the bearer token on every non-GET request.
func auth(token string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if token != "" && r.Method != http.MethodGet && r.Method != http.MethodHead {
				got := strings.TrimSpace(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
				if subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 || !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
					w.Header().Set("WWW-Authenticate", `Bearer realm="gend"`)
					writeError(w, &api.Error{Status: http.StatusUnauthorized, Code: "unauthorized",
						Message: "this request needs Authorization: Bearer <token>"})
					return
				}
			}
			next.ServeHTTP(w, r)
		})
	}
}

type handlers struct {
	svc Service
	log zerolog.Logger
}

func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &api.Error{Status: http.StatusRequestEntityTooLarge, Code: "body_too_large",
				Message: "request body over " + strconv.Itoa(MaxBodyBytes) + " bytes"}
		}
		return nil, &api.Error{Status: http.StatusBadRequest, Code: "bad_body", Message: "read body: " + err.Error()}
	}
	return raw, nil
}

func (h *handlers) submit(w http.ResponseWriter, r *http.Request) {
	raw, err := readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	j, err := h.svc.SubmitJob(r.Context(), raw)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Location", "/v1/jobs/"+j.ID)
	writeJSON(w, http.StatusCreated, j)
}

func (h *handlers) list(w http.ResponseWriter, _ *http.Request) {
	jobs := h.svc.Jobs()
	if jobs == nil {
		jobs = []api.Job{}
	}
	writeJSON(w, http.StatusOK, api.JobList{Jobs: jobs})
}

func (h *handlers) get(w http.ResponseWriter, r *http.Request) {
	j, err := h.svc.Job(chi.URLParam(r, "id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, j)
}

func (h *handlers) action(f func(string) (api.Job, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if _, err := readBody(w, r); err != nil {
			writeError(w, err)
			return
		}
		j, err := f(chi.URLParam(r, "id"))
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, j)
	}
}

func (h *handlers) resize(w http.ResponseWriter, r *http.Request) {
	raw, err := readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	req, err := spec.DecodeResize(raw)
	if err != nil {
		writeError(w, err)
		return
	}
	j, err := h.svc.ResizeJob(chi.URLParam(r, "id"), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, j)
}

func (h *handlers) eta(w http.ResponseWriter, r *http.Request) {
	e, err := h.svc.ETA(chi.URLParam(r, "id"))
	if err != nil {
		writeError(w, err)
		return
	}
	if strings.Contains(r.Header.Get("Accept"), "application/json") {
		writeJSON(w, http.StatusOK, e)
		return
	}
	writeText(w, http.StatusOK, e.Line+"\n")
}

func (h *handlers) servers(w http.ResponseWriter, _ *http.Request) {
	s := h.svc.Servers()
	if s == nil {
		s = []api.Server{}
	}
	writeJSON(w, http.StatusOK, api.ServerList{Servers: s})
}

func (h *handlers) addServer(w http.ResponseWriter, r *http.Request) {
	raw, err := readBody(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	s, err := spec.DecodeServer(raw)
	if err != nil {
		writeError(w, err)
		return
	}
	out, err := h.svc.AddServer(s)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, out)
}

func (h *handlers) removeServer(w http.ResponseWriter, r *http.Request) {
	if err := h.svc.RemoveServer(chi.URLParam(r, "name")); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]string{"status": "draining"})
}

func (h *handlers) ready(w http.ResponseWriter, _ *http.Request) {
	if err := h.svc.Ready(); err != nil {
		writeError(w, &api.Error{Status: http.StatusServiceUnavailable, Code: "not_ready", Message: err.Error()})
		return
	}
	writeText(w, http.StatusOK, "ready\n")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		status = http.StatusInternalServerError
		raw, _ = json.Marshal(api.ErrorBody{Error: api.ErrorDetail{Code: "internal", Message: "encode response: " + err.Error()}})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(raw, '\n'))
}

func writeText(w http.ResponseWriter, status int, s string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, s)
}

// writeError is the one place errors become JSON.
func writeError(w http.ResponseWriter, err error) {
	var ae *api.Error
	var inv *spec.Invalid
	switch {
	case errors.As(err, &ae):
	case errors.As(err, &inv):
		ae = &api.Error{Status: http.StatusBadRequest, Code: "invalid_" + strings.ReplaceAll(inv.What, " ", "_"),
			Message: "invalid " + inv.What, Problems: inv.Problems}
	default:
		ae = &api.Error{Status: http.StatusInternalServerError, Code: "internal", Message: err.Error()}
	}
	writeJSON(w, ae.Status, api.ErrorBody{Error: api.ErrorDetail{Code: ae.Code, Message: ae.Message, Problems: ae.Problems}})
}
