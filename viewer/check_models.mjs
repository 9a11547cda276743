// Check that MuJoCo models load in mujoco-js (MuJoCo's WebAssembly build) and pose like the
// Python MuJoCo: node viewer/check_models.mjs CASES.json prints one JSON result per case.
//
// CASES.json: [{"name", "files": {"rel/path.xml": "/abs/path", ...}, "main": "rel/path.xml",
//               "qpos": [[...], ...], "geom_xpos": [[...], ...]}]  (geom_xpos per qpos row)
// Result: {"name", "ok", "version", "nq", "nv", "ngeom", "nbody", "max_err", "error"}.
import { readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import loadMujoco from './node_modules/mujoco-js/dist/mujoco_wasm.js';

const cases = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const mujoco = await loadMujoco();
const version = mujoco.mj_versionString();
const results = [];
cases.forEach((c, k) => {
  const root = `/check/${k}`;
  const out = { name: c.name, ok: false, version, error: null };
  let model = null, data = null;
  try {
    for (const [rel, abs] of Object.entries(c.files)) {
      mujoco.FS.mkdirTree(dirname(`${root}/${rel}`));
      mujoco.FS.writeFile(`${root}/${rel}`, readFileSync(abs));
    }
    model = mujoco.MjModel.loadFromXML(`${root}/${c.main}`);
    data = new mujoco.MjData(model);
    Object.assign(out, { nq: model.nq, nv: model.nv, ngeom: model.ngeom, nbody: model.nbody });
    let err = 0;
    c.qpos.forEach((q, i) => {
      data.qpos.set(q);
      mujoco.mj_forward(model, data);
      const x = data.geom_xpos;
      const want = c.geom_xpos[i];
      if (want.length !== x.length) err = Infinity;
      else for (let j = 0; j < x.length; j++) err = Math.max(err, Math.abs(x[j] - want[j]));
    });
    out.max_err = err;
    out.ok = err <= 1e-9;
    if (!out.ok) out.error = `geom positions differ from the Python MuJoCo by ${err}`;
  } catch (e) {
    out.error = [e?.name, e?.message].filter(Boolean).join(': ') || String(e);
  } finally {
    data?.delete();
    model?.delete();
  }
  results.push(out);
});
console.log(JSON.stringify(results));
