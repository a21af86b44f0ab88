// Validates Kubernetes documents (JSON, one array on stdin) against their
// published schemas, through the kubernetes-models packages. Prints one line
// per document ("ok KIND NAME" or "invalid KIND NAME: why"); exits 1 if any is
// invalid or of a kind with no schema here. Used by tests/test_packaging.py
// and tests/test_kubernetes.py.
//
// Two checks per document: the package's own validator (types, enums,
// required fields, patterns: the published OpenAPI schema), and unknown
// fields. Kubernetes' OpenAPI schemas do not forbid fields they do not name,
// so a misspelt key (`readinesProbe`) passes the first check; the API server
// refuses it (kubectl's default strict field validation). The second check
// walks each document along the package's type declarations (.d.ts), the same
// schema as TypeScript types, and names any field they do not declare.
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
const MODULES = join(HERE, "node_modules");
const SPECS = [
  "@kubernetes-models/istio/extensions.istio.io/v1alpha1/WasmPlugin",
  "@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1/HTTPRoute",
  "kubernetes-models/networking.k8s.io/v1/Ingress",
  "kubernetes-models/networking.k8s.io/v1/NetworkPolicy",
  "kubernetes-models/v1/ConfigMap",
  "kubernetes-models/v1/Secret",
  "kubernetes-models/v1/Service",
  "kubernetes-models/apps/v1/Deployment",
  "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PodMonitor",
];
const MODELS = await Promise.all(SPECS.map(async spec => {
  const name = spec.split("/").pop();
  return { Model: (await import(spec))[name], dts: join(MODULES, `${spec}.d.ts`), name: `I${name}` };
}));

// --- the type declarations, read as a schema --------------------------------

const files = new Map();   // .d.ts path -> { imports: name -> path, types: name -> type text or {props} }

function loadDts(path) {
  if (files.has(path)) return files.get(path);
  const text = readFileSync(path, "utf8").replace(/\/\*[\s\S]*?\*\//g, "");
  const imports = new Map();
  for (const m of text.matchAll(/import\s*(?:type\s*)?\{([^}]*)\}\s*from\s*"([^"]+)"/g)) {
    const target = m[2].startsWith(".") ? resolve(dirname(path), m[2].replace(/\.js$/, ".d.ts")) : join(MODULES, `${m[2]}.d.ts`);
    for (const part of m[1].split(",").map(s => s.trim()).filter(Boolean)) {
      const [orig, local] = part.split(/\s+as\s+/);
      imports.set(local ?? orig, { target, orig });
    }
  }
  const types = new Map();
  for (const m of text.matchAll(/export interface (\w+)(?:\s+extends\s+([\w\s,]+))?\s*\{/g)) {
    const body = balanced(text, m.index + m[0].length - 1);
    const props = parseProps(body);
    const bases = (m[2] ?? "").split(",").map(s => s.trim()).filter(Boolean);
    if (bases.includes("TypeMeta")) {
      props.set("apiVersion", "string");
      props.set("kind", "string");
    }
    types.set(m[1], { props, bases: bases.filter(b => b !== "TypeMeta") });
  }
  for (const m of text.matchAll(/export type (\w+)\s*=\s*([^;]+);/g)) types.set(m[1], m[2].trim());
  for (const m of text.matchAll(/export type \{([^}]*)\}/g)) {
    for (const part of m[1].split(",").map(s => s.trim()).filter(Boolean)) {
      const [orig, alias] = part.split(/\s+as\s+/);
      if (alias && types.has(orig)) types.set(alias, types.get(orig));
    }
  }
  const file = { path, imports, types };
  files.set(path, file);
  return file;
}

// The text between the brace at `open` and its match, braces excluded.
function balanced(text, open) {
  let depth = 0;
  for (let i = open; i < text.length; i++) {
    if ("{<(".includes(text[i])) depth++;
    else if ("}>)".includes(text[i]) && --depth === 0) return text.slice(open + 1, i);
  }
  throw new Error("unbalanced declaration");
}

// `"name"?: TYPE;` at the top level of an interface or object type body.
function parseProps(body) {
  const props = new Map();
  let i = 0;
  while (i < body.length) {
    const m = /^\s*"([^"]+)"\??:\s*/.exec(body.slice(i));
    if (!m) {
      const skip = body.indexOf(";", i);
      if (skip < 0) break;
      i = skip + 1;
      continue;
    }
    i += m[0].length;
    let depth = 0, j = i;
    for (; j < body.length; j++) {
      if ("{<(".includes(body[j])) depth++;
      else if ("}>)".includes(body[j])) depth--;
      else if (body[j] === ";" && depth === 0) break;
    }
    props.set(m[1], body.slice(i, j).trim());
    i = j + 1;
  }
  return props;
}

// What a type text means for a value: an object with named fields, a map, an
// array, or a leaf (primitives, literals, int-or-string) that has no fields.
function meaning(type, file) {
  type = type.trim();
  let m;
  if ((m = /^Array<([\s\S]*)>$/.exec(type))) return { array: m[1], file };
  if (type.startsWith("{")) {
    const body = balanced(type, 0);
    if (!body.trim()) return { leaf: true };   // {}: any object (a CRD's preserve-unknown-fields, as Istio's pluginConfig)
    if ((m = /^\s*\[key: string\]:\s*([\s\S]*?);?\s*$/.exec(body))) return { map: m[1], file };
    return { props: parseProps(body), file };
  }
  const members = type.split("|").map(s => s.trim());
  const named = members.filter(t => /^[A-Z]\w*$/.test(t));
  if (named.length === 1) return lookup(named[0], file);
  return { leaf: true };
}

function lookup(name, file) {
  if (file.types.has(name)) {
    const t = file.types.get(name);
    if (typeof t === "string") return meaning(t, file);
    // an interface's own fields and those of the interfaces it extends
    const props = new Map(t.props);
    for (const base of t.bases) {
      const b = lookup(base, file);
      if (!b.props) throw new Error(`${name} extends ${base}, which has no fields`);
      for (const [k, v] of b.props) if (!props.has(k)) props.set(k, typeof v === "string" ? { type: v, file: b.file } : v);
    }
    return { props, file };
  }
  const imp = file.imports.get(name);
  if (!imp) {
    if (["TypeMeta", "ModelData", "Model"].includes(name)) return { leaf: true };
    throw new Error(`type ${name} not found from ${file.path}`);
  }
  return lookup(imp.orig, loadDts(imp.target));
}

function unknownFields(value, m, path, out) {
  if (m.leaf || value === null || typeof value !== "object") return;
  if (m.array !== undefined) {
    if (Array.isArray(value)) value.forEach((v, i) => unknownFields(v, meaning(m.array, m.file), `${path}[${i}]`, out));
  } else if (m.map !== undefined) {
    for (const [k, v] of Object.entries(value)) unknownFields(v, meaning(m.map, m.file), `${path}.${k}`, out);
  } else if (m.props) {
    for (const [k, v] of Object.entries(value)) {
      const at = path ? `${path}.${k}` : k;
      const t = m.props.get(k);
      if (t === undefined) out.push(at);
      else unknownFields(v, typeof t === "string" ? meaning(t, m.file) : meaning(t.type, t.file), at, out);
    }
  }
}

// --- each document ------------------------------------------------------------

const docs = JSON.parse(await new Promise(res => { let s = ""; process.stdin.on("data", d => s += d).on("end", () => res(s)); }));
let bad = 0;
for (const doc of docs) {
  const what = `${doc.apiVersion}/${doc.kind} ${doc.metadata?.name}`;
  const found = MODELS.find(({ Model }) => Model.apiVersion === doc.apiVersion && Model.kind === doc.kind);
  if (!found) { console.log(`noschema ${what}`); bad++; continue; }
  try { new found.Model(doc).validate(); }
  catch (e) { console.log(`invalid ${what}: ${e.message}`); bad++; continue; }
  const unknown = [];
  unknownFields(doc, lookup(found.name, loadDts(found.dts)), "", unknown);
  if (unknown.length) { console.log(`invalid ${what}: unknown field ${unknown.join(", ")} (the schema declares no such field)`); bad++; continue; }
  console.log(`ok ${what}`);
}
process.exit(bad ? 1 : 0);
