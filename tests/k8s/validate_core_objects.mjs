// Validates the core objects `shardtrain k8s` renders (written by validate_manifests.py) with
// the Kubernetes API schemas of the npm packages kubernetes-models (Service, Deployment,
// ConfigMap, Secret, NetworkPolicy) and @kubernetes-models/prometheus-operator (PodMonitor).
//   node validate_core_objects.mjs NODE_MODULES_DIR CORE_OBJECTS.json
// Exits 0 when every object is valid, else prints each error and exits 1.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [modules, objectsPath] = process.argv.slice(2);
const load = async (file) => import(pathToFileURL(join(modules, file)).href);
const core = await load("kubernetes-models/v1/index.js");
const apps = await load("kubernetes-models/apps/v1/index.js");
const networking = await load("kubernetes-models/networking.k8s.io/v1/index.js");
const monitoring = await load(
  "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/index.js");
const models = {
  "v1/Service": core.Service,
  "v1/ConfigMap": core.ConfigMap,
  "v1/Secret": core.Secret,
  "apps/v1/Deployment": apps.Deployment,
  "networking.k8s.io/v1/NetworkPolicy": networking.NetworkPolicy,
  "monitoring.coreos.com/v1/PodMonitor": monitoring.PodMonitor,
};

const counts = {};
let failures = 0;
for (const { source, object } of JSON.parse(readFileSync(objectsPath, "utf8"))) {
  const key = `${object.apiVersion}/${object.kind}`;
  const Model = models[key];
  try {
    if (!Model) throw new Error(`no model for ${key}`);
    new Model(object).validate();
    counts[key] = (counts[key] ?? 0) + 1;
  } catch (error) {
    failures += 1;
    console.log(`INVALID ${source}: ${key} ${object.metadata?.name}: ${error.message}`);
  }
}
for (const [key, count] of Object.entries(counts)) console.log(`checked ${count} ${key}`);
process.exit(failures === 0 ? 0 : 1);
