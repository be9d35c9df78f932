// helmrender: renders a Helm chart the way `helm template` does, for the parts of Helm's
// semantics that helm/fetchcost uses. Helm itself is not packaged in Debian; this program is built
// offline from Debian's Go packages (Go's text/template, Masterminds/sprig, gopkg.in/yaml.v2) so
// the chart can be rendered and checked in CI.
//
// What it implements (following Helm 3's pkg/engine and pkg/chartutil):
//   - .Values: the chart's values.yaml coalesced with -f files (maps merge, null deletes a key)
//     and --set a.b.c=v (typed scalars: true/false, integers, null; strings otherwise);
//     numbers are float64 as in Helm (values go through JSON there).
//   - .Release (Name, Namespace, Service, IsInstall, IsUpgrade, Revision), .Chart (Chart.yaml,
//     field names capitalised as Helm's chart.Metadata), .Capabilities (KubeVersion,
//     APIVersions.Has), .Template (Name, BasePath), .Files (Get, GetBytes, Glob, Lines).
//   - sprig's functions (without env/expandenv), include, tpl, required, toYaml, fromYaml,
//     toJson, fromJson, fromYamlArray, fromJsonArray, lookup (always empty: no cluster).
//   - missingkey=zero with "<no value>" removed from the output, templates whose names start
//     with "_" are partials, NOTES.txt is skipped, empty documents are dropped.
//
// --print-values prints the coalesced .Values as JSON instead; --notes renders NOTES.txt.
// Output: the manifests as `helm template` prints them ("---\n# Source: chart/templates/x"), or
// with --output json a JSON array [{"source": ..., "object": {...}}, ...] where every document has
// been parsed as YAML (a document that does not parse is an error, as it is for kubectl).
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
	yaml "gopkg.in/yaml.v2"
)

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// ---------------------------------------------------------------------------------------------
// YAML/JSON helpers (Helm converts YAML to JSON-compatible values: string keys, float64 numbers)

func normalize(v interface{}) interface{} {
	switch t := v.(type) {
	case map[interface{}]interface{}:
		out := make(map[string]interface{}, len(t))
		for k, val := range t {
			out[fmt.Sprint(k)] = normalize(val)
		}
		return out
	case map[string]interface{}:
		out := make(map[string]interface{}, len(t))
		for k, val := range t {
			out[k] = normalize(val)
		}
		return out
	case []interface{}:
		out := make([]interface{}, len(t))
		for i, val := range t {
			out[i] = normalize(val)
		}
		return out
	case int:
		return float64(t)
	case int64:
		return float64(t)
	case uint64:
		return float64(t)
	default:
		return v
	}
}

// jsonCompatible converts YAML-decoded values to what encoding/json accepts (string keys) while
// keeping integers as integers (for the JSON output of rendered documents).
func jsonCompatible(v interface{}) interface{} {
	switch t := v.(type) {
	case map[interface{}]interface{}:
		out := make(map[string]interface{}, len(t))
		for k, val := range t {
			out[fmt.Sprint(k)] = jsonCompatible(val)
		}
		return out
	case []interface{}:
		out := make([]interface{}, len(t))
		for i, val := range t {
			out[i] = jsonCompatible(val)
		}
		return out
	default:
		return v
	}
}

// toYAML follows sigs.k8s.io/yaml.Marshal as Helm uses it: through JSON, then YAML (sorted keys).
func toYAML(v interface{}) string {
	j, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	var obj interface{}
	if err := yaml.Unmarshal(j, &obj); err != nil {
		return ""
	}
	out, err := yaml.Marshal(obj)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(out), "\n")
}

func fromYAML(s string) map[string]interface{} {
	var obj interface{}
	if err := yaml.Unmarshal([]byte(s), &obj); err != nil {
		return map[string]interface{}{"Error": err.Error()}
	}
	m, ok := normalize(obj).(map[string]interface{})
	if !ok {
		return map[string]interface{}{}
	}
	return m
}

func fromYAMLArray(s string) []interface{} {
	var obj interface{}
	if err := yaml.Unmarshal([]byte(s), &obj); err != nil {
		return []interface{}{err.Error()}
	}
	a, _ := normalize(obj).([]interface{})
	return a
}

func toJSON(v interface{}) string {
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

func fromJSON(s string) map[string]interface{} {
	m := map[string]interface{}{}
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		m["Error"] = err.Error()
	}
	return m
}

func fromJSONArray(s string) []interface{} {
	var a []interface{}
	if err := json.Unmarshal([]byte(s), &a); err != nil {
		return []interface{}{err.Error()}
	}
	return a
}

// ---------------------------------------------------------------------------------------------
// Values

// coalesce merges src over dst the way Helm merges user values over chart defaults.
func coalesce(dst, src map[string]interface{}) map[string]interface{} {
	if dst == nil {
		dst = map[string]interface{}{}
	}
	for k, sv := range src {
		if sv == nil {
			delete(dst, k)
			continue
		}
		dv, exists := dst[k]
		sm, sIsMap := sv.(map[string]interface{})
		dm, dIsMap := dv.(map[string]interface{})
		if exists && sIsMap && dIsMap {
			dst[k] = coalesce(dm, sm)
		} else {
			dst[k] = sv
		}
	}
	return dst
}

func readYAMLMap(file string) (map[string]interface{}, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var obj interface{}
	if err := yaml.Unmarshal(data, &obj); err != nil {
		return nil, fmt.Errorf("%s: %v", file, err)
	}
	if obj == nil {
		return map[string]interface{}{}, nil
	}
	m, ok := normalize(obj).(map[string]interface{})
	if !ok {
		return nil, fmt.Errorf("%s: not a YAML mapping", file)
	}
	return m, nil
}

func typedScalar(s string) interface{} {
	switch s {
	case "true":
		return true
	case "false":
		return false
	case "null":
		return nil
	}
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return i // Helm's strvals: --set integers are int64 (values files give float64)
	}
	return s
}

// applySet handles --set a.b.c=v and a.b={x,y}.
func applySet(values map[string]interface{}, expr string) error {
	eq := strings.Index(expr, "=")
	if eq <= 0 {
		return fmt.Errorf("--set %q: expected key=value", expr)
	}
	keys := strings.Split(expr[:eq], ".")
	raw := expr[eq+1:]
	var val interface{}
	if strings.HasPrefix(raw, "{") && strings.HasSuffix(raw, "}") {
		list := []interface{}{}
		for _, item := range strings.Split(raw[1:len(raw)-1], ",") {
			if item != "" {
				list = append(list, typedScalar(item))
			}
		}
		val = list
	} else {
		val = typedScalar(raw)
	}
	m := values
	for _, k := range keys[:len(keys)-1] {
		next, ok := m[k].(map[string]interface{})
		if !ok {
			next = map[string]interface{}{}
			m[k] = next
		}
		m = next
	}
	m[keys[len(keys)-1]] = val
	return nil
}

// ---------------------------------------------------------------------------------------------
// Built-in objects

type apiVersions []string

func (a apiVersions) Has(v string) bool {
	for _, x := range a {
		if x == v {
			return true
		}
	}
	return false
}

type files map[string][]byte

func (f files) Get(name string) string      { return string(f[name]) }
func (f files) GetBytes(name string) []byte { return f[name] }
func (f files) Lines(name string) []string {
	s := strings.TrimSuffix(string(f[name]), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}
func (f files) Glob(pattern string) files {
	out := files{}
	for name, data := range f {
		if ok, _ := path.Match(pattern, name); ok {
			out[name] = data
		}
	}
	return out
}

var chartFieldNames = map[string]string{"apiVersion": "APIVersion", "kubeVersion": "KubeVersion"}

func chartMetadata(file string) (map[string]interface{}, error) {
	raw, err := readYAMLMap(file)
	if err != nil {
		return nil, err
	}
	out := map[string]interface{}{}
	for k, v := range raw {
		name, ok := chartFieldNames[k]
		if !ok {
			name = strings.ToUpper(k[:1]) + k[1:]
		}
		if s, isFloat := v.(float64); isFloat && (k == "version" || k == "appVersion") {
			v = strconv.FormatFloat(s, 'f', -1, 64)
		}
		out[name] = v
	}
	if _, ok := out["Name"]; !ok {
		return nil, fmt.Errorf("%s: no name", file)
	}
	return out, nil
}

// ---------------------------------------------------------------------------------------------
// Rendering

type renderer struct {
	tmpl *template.Template
}

func (r *renderer) funcs() template.FuncMap {
	f := sprig.TxtFuncMap()
	delete(f, "env")
	delete(f, "expandenv")
	f["toYaml"] = toYAML
	f["fromYaml"] = fromYAML
	f["fromYamlArray"] = fromYAMLArray
	f["toJson"] = toJSON
	f["fromJson"] = fromJSON
	f["fromJsonArray"] = fromJSONArray
	f["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil {
			return nil, errors.New(msg)
		}
		if s, ok := v.(string); ok && s == "" {
			return nil, errors.New(msg)
		}
		return v, nil
	}
	f["lookup"] = func(string, string, string, string) (map[string]interface{}, error) {
		return map[string]interface{}{}, nil
	}
	f["include"] = func(name string, data interface{}) (string, error) {
		var buf bytes.Buffer
		if err := r.tmpl.ExecuteTemplate(&buf, name, data); err != nil {
			return "", err
		}
		return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
	}
	f["tpl"] = func(text string, data interface{}) (string, error) {
		clone, err := r.tmpl.Clone()
		if err != nil {
			return "", err
		}
		t, err := clone.New("tpl").Option("missingkey=zero").Parse(text)
		if err != nil {
			return "", fmt.Errorf("tpl: %v", err)
		}
		var buf bytes.Buffer
		if err := t.Execute(&buf, data); err != nil {
			return "", fmt.Errorf("tpl: %v", err)
		}
		return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
	}
	return f
}

type options struct {
	chartDir     string
	valueFiles   multiFlag
	sets         multiFlag
	releaseName  string
	namespace    string
	apiVersions  multiFlag
	kubeVersion  string
	outputFormat string
	printValues  bool
	notes        bool
	yamlToJSON   bool
}

type document struct {
	Source string      `json:"source"`
	Object interface{} `json:"object"`
}

func render(o options) (string, []document, error) {
	chart, err := chartMetadata(filepath.Join(o.chartDir, "Chart.yaml"))
	if err != nil {
		return "", nil, err
	}
	chartName := chart["Name"].(string)
	values, err := readYAMLMap(filepath.Join(o.chartDir, "values.yaml"))
	if err != nil {
		return "", nil, err
	}
	for _, vf := range o.valueFiles {
		user, err := readYAMLMap(vf)
		if err != nil {
			return "", nil, err
		}
		values = coalesce(values, user)
	}
	for _, s := range o.sets {
		if err := applySet(values, s); err != nil {
			return "", nil, err
		}
	}
	if o.printValues {
		b, err := json.MarshalIndent(values, "", " ")
		return string(b) + "\n", nil, err
	}

	// Files (everything outside templates/), and the templates.
	chartFiles := files{}
	type tpl struct{ name, text string }
	var templates []tpl
	err = filepath.Walk(o.chartDir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(o.chartDir, p)
		rel = filepath.ToSlash(rel)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.HasPrefix(rel, "templates/") {
			templates = append(templates, tpl{chartName + "/" + rel, string(data)})
		} else {
			chartFiles[rel] = data
		}
		return nil
	})
	if err != nil {
		return "", nil, err
	}
	sort.Slice(templates, func(i, j int) bool { return templates[i].name < templates[j].name })

	r := &renderer{}
	r.tmpl = template.New("gotpl").Option("missingkey=zero")
	r.tmpl.Funcs(r.funcs())
	for _, t := range templates {
		if _, err := r.tmpl.New(t.name).Parse(t.text); err != nil {
			return "", nil, err
		}
	}

	major, minor := "1", "29"
	if v := strings.TrimPrefix(o.kubeVersion, "v"); v != "" {
		parts := strings.SplitN(v, ".", 3)
		if len(parts) >= 2 {
			major, minor = parts[0], parts[1]
		}
	}
	apis := apiVersions{"v1", "apps/v1", "batch/v1", "policy/v1", "rbac.authorization.k8s.io/v1",
		"networking.k8s.io/v1", "storage.k8s.io/v1"}
	apis = append(apis, o.apiVersions...)
	capabilities := map[string]interface{}{
		"KubeVersion": map[string]interface{}{
			"Version": "v" + major + "." + minor + ".0", "Major": major, "Minor": minor,
			"GitVersion": "v" + major + "." + minor + ".0",
		},
		"APIVersions": apis,
	}
	release := map[string]interface{}{
		"Name": o.releaseName, "Namespace": o.namespace, "Service": "Helm",
		"IsInstall": true, "IsUpgrade": false, "Revision": 1,
	}

	var out strings.Builder
	var docs []document
	for _, t := range templates {
		base := path.Base(t.name)
		if strings.HasPrefix(base, "_") || (base == "NOTES.txt") != o.notes {
			continue
		}
		data := map[string]interface{}{
			"Values": values, "Release": release, "Chart": chart, "Capabilities": capabilities,
			"Files":    chartFiles,
			"Template": map[string]interface{}{"Name": t.name, "BasePath": chartName + "/templates"},
		}
		var buf bytes.Buffer
		if err := r.tmpl.ExecuteTemplate(&buf, t.name, data); err != nil {
			return "", nil, err
		}
		text := strings.ReplaceAll(buf.String(), "<no value>", "")
		if o.notes {
			out.WriteString(text)
			continue
		}
		for _, part := range splitDocuments(text) {
			if strings.TrimSpace(stripComments(part)) == "" {
				continue
			}
			fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", t.name, strings.TrimSpace(part))
			var obj interface{}
			if err := yaml.Unmarshal([]byte(part), &obj); err != nil {
				return "", nil, fmt.Errorf("%s: rendered document is not valid YAML: %v\n%s", t.name, err, part)
			}
			if obj == nil {
				continue
			}
			if _, ok := obj.(map[interface{}]interface{}); !ok {
				return "", nil, fmt.Errorf("%s: rendered document is not a mapping:\n%s", t.name, part)
			}
			docs = append(docs, document{Source: t.name, Object: jsonCompatible(obj)})
		}
	}
	return out.String(), docs, nil
}

// parseManifests parses "---"-separated manifests with their "# Source:" comments.
func parseManifests(text string) ([]document, error) {
	docs := []document{}
	for _, part := range splitDocuments(text) {
		if strings.TrimSpace(stripComments(part)) == "" {
			continue
		}
		source := ""
		for _, line := range strings.Split(part, "\n") {
			if strings.HasPrefix(line, "# Source: ") {
				source = strings.TrimPrefix(line, "# Source: ")
				break
			}
		}
		var obj interface{}
		if err := yaml.Unmarshal([]byte(part), &obj); err != nil {
			return nil, fmt.Errorf("%s: not valid YAML: %v", source, err)
		}
		docs = append(docs, document{Source: source, Object: jsonCompatible(obj)})
	}
	return docs, nil
}

func splitDocuments(text string) []string {
	var parts []string
	var cur []string
	for _, line := range strings.Split(text, "\n") {
		if strings.TrimRight(line, " \t") == "---" {
			parts = append(parts, strings.Join(cur, "\n"))
			cur = nil
			continue
		}
		cur = append(cur, line)
	}
	return append(parts, strings.Join(cur, "\n"))
}

func stripComments(doc string) string {
	var keep []string
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n")
}

func main() {
	var o options
	flag.StringVar(&o.chartDir, "chart", "", "chart directory")
	flag.Var(&o.valueFiles, "f", "values file (repeatable, later wins)")
	flag.Var(&o.sets, "set", "key.path=value (repeatable)")
	flag.StringVar(&o.releaseName, "name", "fetchcost", "release name")
	flag.StringVar(&o.namespace, "namespace", "default", "release namespace")
	flag.Var(&o.apiVersions, "api-versions", "extra API versions the cluster offers (repeatable)")
	flag.StringVar(&o.kubeVersion, "kube-version", "v1.29.0", "Kubernetes version")
	flag.StringVar(&o.outputFormat, "output", "yaml", "yaml (as helm template) or json")
	flag.BoolVar(&o.printValues, "print-values", false, "print the coalesced .Values as JSON and exit")
	flag.BoolVar(&o.notes, "notes", false, "render templates/NOTES.txt (as helm install prints it) instead")
	flag.BoolVar(&o.yamlToJSON, "yaml-to-json", false,
		"read manifests (e.g. real `helm template` output) on stdin and print them as --output json does")
	flag.Parse()
	if o.yamlToJSON {
		data, err := io.ReadAll(os.Stdin)
		if err == nil {
			var docs []document
			docs, err = parseManifests(string(data))
			if err == nil {
				err = json.NewEncoder(os.Stdout).Encode(docs)
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "helmrender:", err)
			os.Exit(1)
		}
		return
	}
	if o.chartDir == "" {
		fmt.Fprintln(os.Stderr, "helmrender: --chart DIR is required")
		os.Exit(2)
	}
	text, docs, err := render(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helmrender: Error:", err)
		os.Exit(1)
	}
	if o.outputFormat == "json" && !o.printValues && !o.notes {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", " ")
		if docs == nil {
			docs = []document{}
		}
		if err := enc.Encode(docs); err != nil {
			fmt.Fprintln(os.Stderr, "helmrender:", err)
			os.Exit(1)
		}
		return
	}
	fmt.Print(text)
}
