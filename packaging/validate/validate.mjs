// Validates Kubernetes documents (JSON, one array on stdin) against their
// published schemas, through the kubernetes-models packages. Prints one line
// per document ("ok KIND NAME" or "invalid KIND NAME: why"); exits 1 if any is
// invalid or of a kind with no schema here. Used by tests/test_packaging.py.
import { WasmPlugin } from "@kubernetes-models/istio/extensions.istio.io/v1alpha1/WasmPlugin";
import { HTTPRoute } from "@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1/HTTPRoute";
import { Ingress } from "kubernetes-models/networking.k8s.io/v1/Ingress";
import { ConfigMap } from "kubernetes-models/v1/ConfigMap";

const MODELS = [WasmPlugin, HTTPRoute, Ingress, ConfigMap];

const docs = JSON.parse(await new Promise(res => { let s = ""; process.stdin.on("data", d => s += d).on("end", () => res(s)); }));
let bad = 0;
for (const doc of docs) {
  const what = `${doc.apiVersion}/${doc.kind} ${doc.metadata?.name}`;
  const Model = MODELS.find(M => M.apiVersion === doc.apiVersion && M.kind === doc.kind);
  if (!Model) { console.log(`noschema ${what}`); bad++; continue; }
  try { new Model(doc).validate(); console.log(`ok ${what}`); }
  catch (e) { console.log(`invalid ${what}: ${e.message}`); bad++; }
}
process.exit(bad ? 1 : 0);
