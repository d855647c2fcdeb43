package api

import (
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

type openAPIDoc struct {
	OpenAPI string                                 `json:"openapi"`
	Paths   map[string]map[string]any              `json:"paths"`
	Comps   struct{ Schemas map[string]schemaDoc } `json:"components"`
}

type schemaDoc struct {
	Properties map[string]any `json:"properties"`
	AllOf      []schemaDoc    `json:"allOf"`
	Ref        string         `json:"$ref"`
}

func loadOpenAPI(t *testing.T) openAPIDoc {
	t.Helper()
	b, err := os.ReadFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc openAPIDoc
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi version %q", doc.OpenAPI)
	}
	return doc
}

// Every route of DESIGN.md "REST API" is described.
func TestOpenAPIRoutes(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	want := []string{
		"POST /v1/jobs", "GET /v1/jobs", "GET /v1/jobs/{id}",
		"POST /v1/jobs/{id}/pause", "POST /v1/jobs/{id}/resume", "POST /v1/jobs/{id}/cancel",
		"POST /v1/jobs/{id}/resize", "GET /v1/eta", "GET /v1/jobs/{id}/eta",
		"GET /v1/servers", "POST /v1/servers", "DELETE /v1/servers/{name}",
		"GET /v1/gpus", "GET /v1/diagnosis", "GET /metrics", "GET /healthz", "GET /readyz",
	}
	for _, r := range want {
		method, path, _ := strings.Cut(r, " ")
		if _, ok := doc.Paths[path][strings.ToLower(method)]; !ok {
			t.Errorf("openapi.yaml lacks %s", r)
		}
	}
}

// The schemas name exactly the JSON fields of the Go types.
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	types := []any{ErrorBody{}, ErrorDetail{}, JobSpec{}, RequestSpec{}, OutputSpec{}, SchedulerSpec{},
		ResizeRequest{}, Progress{}, Job{}, JobServer{}, JobList{}, ETA{}, ServerSpec{}, Gauges{}, Server{},
		ServerList{}, GPU{}, GPUs{}, Diagnosis{}, ServerDiagnosis{}, WhatIf{}}
	for _, v := range types {
		typ := reflect.TypeOf(v)
		t.Run(typ.Name(), func(t *testing.T) {
			s, ok := doc.Comps.Schemas[typ.Name()]
			if !ok {
				t.Fatalf("no schema %s", typ.Name())
			}
			got := schemaProps(doc, s)
			want := jsonFields(typ)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("schema %s properties\n got %v\nwant %v", typ.Name(), got, want)
			}
		})
	}
}

func schemaProps(doc openAPIDoc, s schemaDoc) []string {
	var out []string
	if s.Ref != "" {
		return schemaProps(doc, doc.Comps.Schemas[strings.TrimPrefix(s.Ref, "#/components/schemas/")])
	}
	for k := range s.Properties {
		out = append(out, k)
	}
	for _, sub := range s.AllOf {
		out = append(out, schemaProps(doc, sub)...)
	}
	sort.Strings(out)
	return out
}

func jsonFields(typ reflect.Type) []string {
	var out []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag := f.Tag.Get("json")
		if f.Anonymous && tag == "" {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if name != "-" && name != "" {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}
