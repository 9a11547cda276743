// rolltape viewer: plays a MuJoCo tape's recorded qpos in the browser.
//
// MuJoCo's own WebAssembly build (npm mujoco-js) loads the env's MJCF from an in-memory file
// system; for each frame the page sets data.qpos, calls mj_forward and places three.js meshes
// at geom_xpos/geom_xmat. Everything is fetched from this page's folder (manifest.json,
// models/, tapes/, vendor/): no network beyond its own origin.
//
// For tests and scripting: window.rolltapeViewer = {nq, frames, frame, ready, error, tapes,
// geomsDrawn, setFrame(i), poseDigest(), play(), pause(), selectTape(i or name)}.

import * as THREE from 'three';
import { OrbitControls } from 'three/addons/controls/OrbitControls.js';

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);

// mjtGeom, mjtLightType and mjtJoint values of MuJoCo 3.x.
const GEOM = { PLANE: 0, HFIELD: 1, SPHERE: 2, CAPSULE: 3, ELLIPSOID: 4, CYLINDER: 5, BOX: 6, MESH: 7 };
const LIGHT = { SPOT: 0, DIRECTIONAL: 1, POINT: 2 };
const JOINT = { FREE: 0, BALL: 1, SLIDE: 2, HINGE: 3 };
const TEX = { TWO_D: 0, CUBE: 1, SKYBOX: 2 };
const TEXROLE_RGB = 1;
// three.js lights are physical: a light of intensity PI lights a white surface as MuJoCo's
// (OpenGL fixed-function style) light of diffuse 1 does. Colours are used as MuJoCo uses
// them, without sRGB decoding, so lit surfaces come out as bright as in MuJoCo's renders.
const K = Math.PI;
const RAW = THREE.LinearSRGBColorSpace;

const S = {
  mujoco: null, version: null, manifest: null,
  models: new Map(),        // model key -> {model, data, error}
  current: null,            // {key, entry, model, data}
  tapeIndex: -1, qpos: null, frames: 0, nq: 0, fps: 30, frame: 0,
  playing: false, speed: 1, time: 0, last: null, loop: true,
  ready: false, error: null,
  gl: null, scene: null, camera: null, controls: null, sky: null,
  geoms: [], lights: [], followBody: -1, following: false, followAt: null, dirty: true,
};

window.rolltapeViewer = {
  get nq() { return S.nq; },
  get frames() { return S.frames; },
  get frame() { return S.frame; },
  get ready() { return S.ready; },
  get error() { return S.error; },
  get playing() { return S.playing; },
  get mujocoVersion() { return S.version; },
  get geomsDrawn() { return S.geoms.filter(Boolean).length; },
  get tapes() { return (S.manifest?.tapes || []).map((t) => t.name); },
  get tape() { return S.manifest?.tapes[S.tapeIndex]?.name ?? null; },
  setFrame: (i) => setFrame(i),
  poseDigest: () => poseDigest(),
  play: () => setPlaying(true),
  pause: () => setPlaying(false),
  selectTape: (i) => selectTape(typeof i === 'string' ? window.rolltapeViewer.tapes.indexOf(i) : i),
};

function setStatus(text) { $('status').textContent = text; }

function showError(text) {
  S.error = text;
  const box = $('error');
  box.textContent = text;
  box.hidden = false;
}

function clearError() {
  S.error = null;
  $('error').hidden = true;
}

// -- startup ----------------------------------------------------------------------------
async function main() {
  try {
    const res = await fetch('manifest.json', { cache: 'no-cache' });
    if (!res.ok) throw new Error(`manifest.json: HTTP ${res.status}`);
    S.manifest = await res.json();
  } catch (e) {
    showError(`Cannot read this viewer's manifest.json (${e.message}). Open the page through ` +
              '`rolltape view RUN`, not as a file.');
    setStatus('no data');
    return;
  }
  setupControls();
  setupScene();
  try {
    const { default: loadMujoco } = await import('./vendor/mujoco_wasm.js');
    S.mujoco = await loadMujoco();
    S.version = S.mujoco.mj_versionString();
  } catch (e) {
    showError(`MuJoCo's WebAssembly module did not start in this browser: ${describe(e)}. ` +
              'Serve the run with `rolltape view RUN` and use a current browser.');
    setStatus('MuJoCo did not load');
    return;
  }
  const tapes = S.manifest.tapes;
  const select = $('tape');
  tapes.forEach((t, i) => select.add(new Option(`${t.label} (return ${fmt(t.return)})`, String(i))));
  $('tape-label').hidden = tapes.length < 2;
  // ?tape=NAME, else the first policy episode (the baseline's are for comparison).
  const wanted = params.get('tape');
  const named = tapes.findIndex((t) => t.name === wanted);
  const first = Math.max(0, named >= 0 ? named : tapes.findIndex((t) => t.role === 'policy'));
  await selectTape(first);
  if (params.has('frame')) setFrame(Number(params.get('frame')));
  if (S.ready && params.get('autoplay') !== '0') setPlaying(true);
  requestAnimationFrame(tick);
}

function describe(e) {
  if (!e) return 'unknown error';
  const name = e.name && e.name !== 'Error' ? e.name : '';
  const message = e.message || '';
  return [name, message].filter(Boolean).join(': ') || String(e);
}

function fmt(x) {
  return typeof x === 'number' && Number.isFinite(x) ? x.toFixed(2) : 'n/a';
}

// -- models -----------------------------------------------------------------------------
async function loadModel(key) {
  if (S.models.has(key)) return S.models.get(key);
  const spec = S.manifest.models[key];
  const mujoco = S.mujoco;
  const root = `/rolltape/${key}`;
  const entry = { model: null, data: null, error: null };
  try {
    for (const rel of spec.files) {
      const res = await fetch(`${spec.dir}/${rel}`);
      if (!res.ok) throw new Error(`${spec.dir}/${rel}: HTTP ${res.status}`);
      const path = `${root}/${rel}`;
      mujoco.FS.mkdirTree(path.slice(0, path.lastIndexOf('/')));
      mujoco.FS.writeFile(path, new Uint8Array(await res.arrayBuffer()));
    }
  } catch (e) {
    entry.error = `Cannot fetch the model files of ${spec.env_id} (${describe(e)}).`;
    S.models.set(key, entry);
    return entry;
  }
  try {
    entry.model = mujoco.MjModel.loadFromXML(`${root}/${spec.main}`);
    entry.data = new mujoco.MjData(entry.model);
  } catch (e) {
    // mujoco-js reports a compile error by its C++ type only (e.g. mjXError).
    entry.error = `The ${spec.env_id} model (${spec.main}) does not load in this viewer's ` +
      `MuJoCo ${S.version} (mujoco-js), which is older than the MuJoCo the tapes were ` +
      `recorded with: ${describe(e)}. The run's videos and numbers are unaffected.`;
  }
  S.models.set(key, entry);
  return entry;
}

async function selectTape(index) {
  const tapes = S.manifest?.tapes || [];
  if (!(index >= 0 && index < tapes.length)) return false;
  const t = tapes[index];
  setPlaying(false);
  S.ready = false;
  S.tapeIndex = index;
  $('tape').value = String(index);
  setStatus(`loading ${t.label}…`);
  const m = await loadModel(t.model);
  if (m.error) {
    clearScene();
    showError(m.error);
    S.nq = 0; S.frames = 0; S.qpos = null;
    setStatus(`model failed to load in MuJoCo ${S.version}`);
    updateControls();
    return false;
  }
  let qpos;
  try {
    const res = await fetch(t.qpos);
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    qpos = new Float64Array(await res.arrayBuffer());
  } catch (e) {
    showError(`Cannot fetch the recorded states ${t.qpos} (${describe(e)}).`);
    return false;
  }
  if (qpos.length !== t.frames * t.nq) {
    showError(`${t.qpos} holds ${qpos.length} numbers, not ${t.frames} frames x ${t.nq}; ` +
              'rebuild the viewer with `rolltape view --refresh RUN`.');
    return false;
  }
  if (m.model.nq !== t.nq) {
    clearScene();
    showError(`The tape records nq=${t.nq} joint coordinates but ${S.manifest.models[t.model].env_id} ` +
              `compiles to nq=${m.model.nq} in MuJoCo ${S.version}; the viewer cannot pose it.`);
    S.nq = 0; S.frames = 0; S.qpos = null;
    setStatus('model and tape disagree');
    updateControls();
    return false;
  }
  clearError();
  const modelChanged = !S.current || S.current.key !== t.model;
  S.current = { key: t.model, model: m.model, data: m.data, spec: S.manifest.models[t.model] };
  S.qpos = qpos;
  S.nq = t.nq;
  S.frames = t.frames;
  S.fps = t.fps > 0 ? t.fps : 30;
  if (modelChanged) buildScene();
  const frame = Math.min(S.frame, S.frames - 1);
  S.ready = true;
  updateControls();
  $('info').textContent = [
    t.env_id, t.label, `seed ${t.seed ?? 'n/a'}`, `return ${fmt(t.return)}`,
    `${t.length} steps at ${S.fps.toFixed(S.fps % 1 ? 1 : 0)} fps`,
    `drawn by MuJoCo ${S.version} (WebAssembly); recorded with MuJoCo ${t.mujoco ?? '?'}`,
  ].join(' · ');
  setStatus(`model nq=${S.nq}, ${S.frames} frames`);
  setFrame(modelChanged ? 0 : frame);
  if (modelChanged) resetCamera();
  return true;
}

// -- frames -----------------------------------------------------------------------------
function setFrame(i) {
  if (!S.ready) return S.frame;
  const f = Math.max(0, Math.min(S.frames - 1, Math.round(Number(i) || 0)));
  S.time = f / S.fps;
  applyFrame(f);
  return f;
}

function applyFrame(f) {
  const { model, data } = S.current;
  S.frame = f;
  data.qpos.set(S.qpos.subarray(f * S.nq, (f + 1) * S.nq));
  S.mujoco.mj_forward(model, data);
  placeGeoms();
  follow();
  $('scrub').value = String(f);
  $('clock').textContent = `frame ${f} / ${S.frames - 1} · t=${(f / S.fps).toFixed(2)} s`;
  render();
}

// A digest of every body's position and orientation after mj_forward: two frames with the
// same digest have the same pose.
function poseDigest() {
  if (!S.ready) return null;
  const { data } = S.current;
  let h1 = 0x811c9dc5, h2 = 0x01000193;
  for (const arr of [data.xpos, data.xquat]) {
    const bytes = new Uint8Array(arr.buffer, arr.byteOffset, arr.byteLength);
    for (let k = 0; k < bytes.length; k++) {
      h1 = Math.imul(h1 ^ bytes[k], 0x01000193) >>> 0;
      h2 = Math.imul(h2 ^ bytes[k], 0x5bd1e995) >>> 0;
    }
  }
  return h1.toString(16).padStart(8, '0') + h2.toString(16).padStart(8, '0');
}

function setPlaying(on) {
  on = Boolean(on) && S.ready;
  if (on && S.frame >= S.frames - 1) S.time = 0;  // play from the start after the end
  S.playing = on;
  S.last = null;
  $('play').innerHTML = on ? '&#10074;&#10074; Pause' : '&#9654; Play';
}

function tick(now) {
  requestAnimationFrame(tick);
  if (S.playing && S.ready) {
    if (S.last !== null) S.time += ((now - S.last) / 1000) * S.speed;
    S.last = now;
    let f = Math.floor(S.time * S.fps + 1e-9);
    if (f >= S.frames) {
      if (S.loop) { S.time %= S.frames / S.fps; f = Math.floor(S.time * S.fps); }
      else { f = S.frames - 1; setPlaying(false); }
    }
    if (f !== S.frame) applyFrame(f);
  }
  if (S.dirty) render();
}

// -- controls ---------------------------------------------------------------------------
function setupControls() {
  $('play').addEventListener('click', () => setPlaying(!S.playing));
  $('scrub').addEventListener('input', (e) => setFrame(Number(e.target.value)));
  $('speed').addEventListener('change', (e) => { S.speed = Number(e.target.value); });
  $('tape').addEventListener('change', (e) => selectTape(Number(e.target.value)));
  $('loop').addEventListener('change', (e) => { S.loop = e.target.checked; });
  $('follow').addEventListener('change', (e) => {
    S.following = e.target.checked && S.followBody > 0;
    S.followAt = null;
    follow();
    render();
  });
  window.addEventListener('keydown', (e) => {
    if (e.target instanceof HTMLSelectElement || e.target?.id === 'scrub' || !S.ready) return;
    const step = e.shiftKey ? 10 : 1;
    if (e.key === ' ') { setPlaying(!S.playing); e.preventDefault(); }
    else if (e.key === 'ArrowRight') { setPlaying(false); setFrame(S.frame + step); e.preventDefault(); }
    else if (e.key === 'ArrowLeft') { setPlaying(false); setFrame(S.frame - step); e.preventDefault(); }
    else if (e.key === 'Home') setFrame(0);
    else if (e.key === 'End') setFrame(S.frames - 1);
  });
}

function updateControls() {
  const ok = S.ready;
  $('play').disabled = !ok;
  $('scrub').disabled = !ok;
  $('scrub').max = String(Math.max(0, S.frames - 1));
}

// -- three.js scene ---------------------------------------------------------------------
function setupScene() {
  const stage = $('stage');
  try {
    S.gl = new THREE.WebGLRenderer({ antialias: true });
  } catch (e) {
    S.gl = null;
    showError(`WebGL is not available in this browser (${describe(e)}): the recorded poses ` +
              'are computed but cannot be drawn.');
    return;
  }
  S.gl.setPixelRatio(Math.min(window.devicePixelRatio || 1, 2));
  S.gl.outputColorSpace = RAW;
  S.gl.shadowMap.enabled = true;
  S.gl.shadowMap.type = THREE.PCFShadowMap;
  stage.appendChild(S.gl.domElement);
  S.scene = new THREE.Scene();
  S.camera = new THREE.PerspectiveCamera(45, 1, 0.01, 1000);
  S.camera.up.set(0, 0, 1);  // MuJoCo is z-up
  S.scene.add(S.camera);
  S.controls = new OrbitControls(S.camera, S.gl.domElement);
  S.controls.enableDamping = false;
  S.controls.addEventListener('change', () => { S.dirty = true; });
  const resize = () => {
    const w = stage.clientWidth || 1, h = stage.clientHeight || 1;
    S.gl.setSize(w, h, false);
    S.camera.aspect = w / h;
    S.camera.updateProjectionMatrix();
    render();
  };
  new ResizeObserver(resize).observe(stage);
  resize();
}

function clearScene() {
  if (!S.scene) return;
  for (const obj of [...S.scene.children]) {
    if (obj === S.camera) continue;
    S.scene.remove(obj);
    obj.traverse?.((o) => {
      o.geometry?.dispose();
      const mats = Array.isArray(o.material) ? o.material : o.material ? [o.material] : [];
      for (const mat of mats) { mat.map?.dispose(); mat.dispose(); }
    });
  }
  for (const light of [...S.camera.children]) S.camera.remove(light);
  S.geoms = [];
  S.lights = [];
  S.dirty = true;
}

function rgb(r, g, b) { return new THREE.Color().setRGB(r, g, b, RAW); }

// The colour MuJoCo draws a geom with: its material's unless the geom sets its own rgba.
function geomRGBA(m, i) {
  const rgba = m.geom_rgba.slice(4 * i, 4 * i + 4);
  const mat = m.geom_matid[i];
  const isDefault = Math.abs(rgba[0] - 0.5) < 1e-6 && Math.abs(rgba[1] - 0.5) < 1e-6 &&
                    Math.abs(rgba[2] - 0.5) < 1e-6 && rgba[3] === 1;
  return mat >= 0 && isDefault ? m.mat_rgba.slice(4 * mat, 4 * mat + 4) : rgba;
}

function texture2D(m, texid) {
  const w = m.tex_width[texid], h = m.tex_height[texid], nc = m.tex_nchannel[texid];
  const adr = m.tex_adr[texid];
  const src = m.tex_data;
  const rgba = new Uint8Array(w * h * 4);
  for (let p = 0; p < w * h; p++) {
    for (let c = 0; c < 4; c++) {
      rgba[4 * p + c] = c < nc ? src[adr + nc * p + c] : (c === 3 ? 255 : src[adr + nc * p]);
    }
  }
  const tex = new THREE.DataTexture(rgba, w, h, THREE.RGBAFormat);
  tex.colorSpace = RAW;
  tex.wrapS = tex.wrapT = THREE.RepeatWrapping;
  tex.magFilter = THREE.NearestFilter;
  tex.minFilter = THREE.LinearMipmapLinearFilter;
  tex.generateMipmaps = true;
  tex.anisotropy = S.gl.capabilities.getMaxAnisotropy();
  tex.needsUpdate = true;
  return tex;
}

function geomGeometry(m, i, extent) {
  const s = m.geom_size.slice(3 * i, 3 * i + 3);
  switch (m.geom_type[i]) {
    case GEOM.PLANE: {
      // size 0 means infinite: draw it large, the fog hides its edge.
      const big = 60 * extent;
      return new THREE.PlaneGeometry(s[0] > 0 ? 2 * s[0] : big, s[1] > 0 ? 2 * s[1] : big);
    }
    case GEOM.SPHERE: return new THREE.SphereGeometry(s[0], 32, 16);
    case GEOM.ELLIPSOID: return new THREE.SphereGeometry(1, 32, 16).scale(s[0], s[1], s[2]);
    case GEOM.CAPSULE: return new THREE.CapsuleGeometry(s[0], 2 * s[1], 8, 24).rotateX(Math.PI / 2);
    case GEOM.CYLINDER: return new THREE.CylinderGeometry(s[0], s[0], 2 * s[1], 32).rotateX(Math.PI / 2);
    case GEOM.BOX: return new THREE.BoxGeometry(2 * s[0], 2 * s[1], 2 * s[2]);
    case GEOM.MESH: {
      const id = m.geom_dataid[i];
      if (id < 0) return null;
      const va = m.mesh_vertadr[id], vn = m.mesh_vertnum[id];
      const fa = m.mesh_faceadr[id], fn = m.mesh_facenum[id];
      const g = new THREE.BufferGeometry();
      g.setAttribute('position', new THREE.BufferAttribute(
        Float32Array.from(m.mesh_vert.subarray(3 * va, 3 * (va + vn))), 3));
      g.setIndex(Array.from(m.mesh_face.subarray(3 * fa, 3 * (fa + fn))));
      const flat = g.toNonIndexed();  // MuJoCo meshes are mostly faceted (convex hulls, STL)
      flat.computeVertexNormals();
      g.dispose();
      return flat;
    }
    default: return null;  // height fields and SDFs are not drawn
  }
}

function buildScene() {
  clearScene();
  if (!S.scene) return;
  const m = S.current.model;
  const stat = m.stat;
  const extent = stat.extent > 0 ? stat.extent : 1;
  const nroles = m.nmat > 0 ? m.mat_texid.length / m.nmat : 0;
  for (let i = 0; i < m.ngeom; i++) {
    const rgba = geomRGBA(m, i);
    if (m.geom_group[i] > 2 || rgba[3] <= 0) { S.geoms.push(null); continue; }
    const geometry = geomGeometry(m, i, extent);
    if (!geometry) { S.geoms.push(null); continue; }
    const mat = m.geom_matid[i];
    // three.js normalises Blinn-Phong (the peak grows with shininess), MuJoCo does not: scale
    // the specular colour so highlights peak where MuJoCo's do (its lights' specular is 0.3).
    const shininess = 128 * (mat >= 0 ? m.mat_shininess[mat] : 0.5);
    const spec = (mat >= 0 ? m.mat_specular[mat] : 0.5) * 0.3 / (0.25 * (shininess / 2 + 1));
    const opts = {
      color: rgb(rgba[0], rgba[1], rgba[2]),
      transparent: rgba[3] < 1, opacity: rgba[3],
      specular: rgb(spec, spec, spec).multiplyScalar(2), shininess,
    };
    const texid = mat >= 0 && nroles ? m.mat_texid[mat * nroles + TEXROLE_RGB] : -1;
    if (texid >= 0 && m.tex_type[texid] === TEX.TWO_D && m.geom_type[i] === GEOM.PLANE) {
      opts.map = texture2D(m, texid);
      const rep = m.mat_texrepeat.slice(2 * mat, 2 * mat + 2);
      const s = m.geom_size.slice(3 * i, 3 * i + 2);
      const uniform = m.mat_texuniform[mat];
      opts.map.repeat.set(uniform ? rep[0] * 2 * s[0] : rep[0], uniform ? rep[1] * 2 * s[1] : rep[1]);
    }
    const mesh = new THREE.Mesh(geometry, new THREE.MeshPhongMaterial(opts));
    mesh.matrixAutoUpdate = false;
    mesh.castShadow = m.geom_type[i] !== GEOM.PLANE;
    mesh.receiveShadow = true;
    S.scene.add(mesh);
    S.geoms.push(mesh);
  }
  buildLights(m, extent);
  buildSky(m, extent);
  stat.delete?.();
}

function buildLights(m, extent) {
  const vis = m.vis;
  const head = vis.headlight;
  // MuJoCo adds every light's ambient term to the headlight's.
  const ambient = Array.from(head.ambient);
  for (let i = 0; i < m.nlight; i++) {
    if (m.light_active[i]) for (let c = 0; c < 3; c++) ambient[c] += m.light_ambient[3 * i + c];
  }
  // MuJoCo lets bright scenes saturate to white (its floors often do); scale the lights so
  // they add up to at most 1 and the checker floor keeps its colour.
  let total = head.active ? Math.max(...head.diffuse) : 0;
  for (let i = 0; i < m.nlight; i++) {
    if (m.light_active[i]) total += Math.max(...m.light_diffuse.slice(3 * i, 3 * i + 3));
  }
  const k = K / Math.max(1, total + Math.max(...ambient));
  S.scene.add(new THREE.AmbientLight(rgb(...ambient), k));
  // The headlight shines from the camera, as MuJoCo's does.
  if (head.active) {
    const lamp = new THREE.DirectionalLight(rgb(...head.diffuse), k);
    lamp.position.set(0, 0, 0);
    lamp.target.position.set(0, 0, -1);
    S.camera.add(lamp, lamp.target);
  }
  let shadows = 0;
  for (let i = 0; i < m.nlight; i++) {
    if (!m.light_active[i]) continue;
    const color = rgb(...m.light_diffuse.slice(3 * i, 3 * i + 3));
    const type = m.light_type[i];
    let light;
    if (type === LIGHT.DIRECTIONAL) light = new THREE.DirectionalLight(color, k);
    else if (type === LIGHT.POINT) light = new THREE.PointLight(color, k, 0, 0);
    else {
      light = new THREE.SpotLight(color, k, 0, Math.min(Math.PI / 2.05,
        THREE.MathUtils.degToRad(m.light_cutoff[i])), 0.3, 0);
    }
    if (m.light_castshadow[i] && shadows < 2 && type !== LIGHT.POINT) {
      shadows += 1;
      light.castShadow = true;
      light.shadow.mapSize.set(2048, 2048);
      light.shadow.bias = -0.0005;
      light.shadow.normalBias = 0.01;
      light.shadow.radius = 3;
      if (type === LIGHT.DIRECTIONAL) {
        const half = Math.min(extent, 4);
        Object.assign(light.shadow.camera, { left: -half, right: half, top: half, bottom: -half,
                                             near: 0.05, far: 40 * extent });
      }
    }
    S.scene.add(light);
    if (light.target) S.scene.add(light.target);
    S.lights.push({ index: i, type, light });
  }
  vis.delete?.();
}

// MuJoCo's gradient skybox as a sphere around the camera; the fog fades the floor into it.
function buildSky(m, extent) {
  let top = rgb(0.55, 0.62, 0.7), bottom = rgb(0.2, 0.22, 0.25);  // no skybox
  for (let t = 0; t < m.ntex; t++) {
    if (m.tex_type[t] !== TEX.SKYBOX) continue;
    const w = m.tex_width[t], h = m.tex_height[t], nc = m.tex_nchannel[t], adr = m.tex_adr[t];
    let hi = -1, lo = 1e9, hiC = null, loC = null;
    for (let row = 0; row < h; row += Math.max(1, h >> 6)) {
      const p = adr + nc * (row * w + (w >> 1));
      const c = [m.tex_data[p], m.tex_data[p + (nc > 1 ? 1 : 0)], m.tex_data[p + (nc > 2 ? 2 : 0)]];
      const lum = c[0] + c[1] + c[2];
      if (lum > hi) { hi = lum; hiC = c; }
      if (lum < lo) { lo = lum; loC = c; }
    }
    // Keep it a backdrop: never brighter than a light overcast sky.
    const tone = (c, k) => rgb(...c.map((v) => Math.min(v / 255, 0.85) * k));
    top = tone(hiC, 0.85);
    bottom = tone(loC, 1);
    break;
  }
  const horizon = top.clone().lerp(bottom, 0.45);
  const geometry = new THREE.SphereGeometry(1, 32, 16);
  const material = new THREE.ShaderMaterial({
    uniforms: { top: { value: top }, bottom: { value: bottom }, horizon: { value: horizon } },
    vertexShader: `varying vec3 vDir;
      void main() { vDir = normalize(position);
        gl_Position = projectionMatrix * modelViewMatrix * vec4(position, 1.0); }`,
    fragmentShader: `uniform vec3 top; uniform vec3 bottom; uniform vec3 horizon; varying vec3 vDir;
      void main() { float z = normalize(vDir).z;
        vec3 c = z > 0.0 ? mix(horizon, top, smoothstep(0.0, 0.7, z))
                         : mix(horizon, bottom, smoothstep(0.0, 0.3, -z));
        gl_FragColor = vec4(c, 1.0);
        #include <colorspace_fragment>
      }`,
    side: THREE.BackSide, depthWrite: false, depthTest: false, fog: false,
  });
  S.sky = new THREE.Mesh(geometry, material);
  S.sky.renderOrder = -1;
  S.sky.frustumCulled = false;
  S.sky.onBeforeRender = (renderer, scene, camera) => {
    S.sky.position.copy(camera.position);
    S.sky.scale.setScalar(camera.far * 0.5);
    S.sky.updateMatrixWorld();
  };
  S.scene.add(S.sky);
  S.scene.fog = new THREE.Fog(horizon, 4 * extent, 12 * extent);
  S.scene.background = horizon;
}

function placeGeoms() {
  if (!S.scene) return;
  const { data } = S.current;
  const xpos = data.geom_xpos, xmat = data.geom_xmat;
  for (let i = 0; i < S.geoms.length; i++) {
    const mesh = S.geoms[i];
    if (!mesh) continue;
    const p = 3 * i, r = 9 * i;
    mesh.matrix.set(xmat[r], xmat[r + 1], xmat[r + 2], xpos[p],
                    xmat[r + 3], xmat[r + 4], xmat[r + 5], xpos[p + 1],
                    xmat[r + 6], xmat[r + 7], xmat[r + 8], xpos[p + 2],
                    0, 0, 0, 1);
    mesh.matrixWorldNeedsUpdate = true;
  }
  const lpos = data.light_xpos, ldir = data.light_xdir;
  for (const { index, type, light } of S.lights) {
    const p = new THREE.Vector3(lpos[3 * index], lpos[3 * index + 1], lpos[3 * index + 2]);
    const d = new THREE.Vector3(ldir[3 * index], ldir[3 * index + 1], ldir[3 * index + 2]);
    if (type === LIGHT.DIRECTIONAL) {
      // Aim at what the camera looks at so the shadow map covers it.
      const at = S.controls ? S.controls.target.clone() : p.clone();
      light.position.copy(at).addScaledVector(d, -10);
      light.target.position.copy(at);
    } else {
      light.position.copy(p);
      light.target?.position.copy(p).add(d);
    }
    light.target?.updateMatrixWorld();
  }
  S.dirty = true;
}

// -- camera -----------------------------------------------------------------------------
// Gymnasium's camera for the env (default_camera_config), in MuJoCo's convention; what it
// leaves out frames the model's geoms (MuJoCo's own default centres on the whole world,
// which for some envs is a far-away floor).
function resetCamera() {
  if (!S.camera) return;
  const m = S.current.model, data = S.current.data;
  const cam = S.current.spec.camera || {};
  const vis = m.vis;
  const fovy = vis.global.fovy;
  const az = THREE.MathUtils.degToRad(cam.azimuth ?? vis.global.azimuth);
  const el = THREE.MathUtils.degToRad(cam.elevation ?? vis.global.elevation);
  const tracked = chooseFollowBody(m, cam);
  S.followBody = tracked > 0 ? tracked : (m.nbody > 1 ? 1 : -1);  // what "Follow" follows
  S.following = tracked > 0;
  const fit = fitGeoms(m, data);
  let lookat = fit.center;
  if (S.following) {
    const c = data.subtree_com, b = S.followBody;
    lookat = new THREE.Vector3(c[3 * b], c[3 * b + 1], c[3 * b + 2]);
  } else if (cam.lookat) {
    lookat = new THREE.Vector3(...cam.lookat);
  }
  const dist = cam.distance ?? Math.max(0.2, 1.2 * fit.radius / Math.sin(THREE.MathUtils.degToRad(fovy) / 2));
  const forward = new THREE.Vector3(Math.cos(el) * Math.cos(az), Math.cos(el) * Math.sin(az), Math.sin(el));
  S.camera.fov = fovy;
  S.camera.near = Math.max(0.005, dist / 200);
  S.camera.far = Math.max(100, 50 * dist);
  S.camera.updateProjectionMatrix();
  if (S.scene.fog) { S.scene.fog.near = 8 * dist; S.scene.fog.far = 25 * dist; }
  S.camera.position.copy(lookat).addScaledVector(forward, -dist);
  S.controls.target.copy(lookat);
  S.controls.update();
  S.followAt = null;
  $('follow').checked = S.following;
  $('follow').disabled = S.followBody <= 0;
  follow();
  placeGeoms();
  render();
  vis.delete?.();
}

// The bounding sphere of the drawn geoms other than planes, at the current pose.
function fitGeoms(m, data) {
  const box = new THREE.Box3();
  const x = data.geom_xpos;
  for (let i = 0; i < m.ngeom; i++) {
    if (!S.geoms[i] || m.geom_type[i] === GEOM.PLANE) continue;
    const r = m.geom_rbound[i];
    const p = new THREE.Vector3(x[3 * i], x[3 * i + 1], x[3 * i + 2]);
    box.expandByPoint(p.clone().addScalar(r)).expandByPoint(p.clone().addScalar(-r));
  }
  if (box.isEmpty()) {
    const stat = m.stat;
    const out = { center: new THREE.Vector3(...stat.center), radius: stat.extent || 1 };
    stat.delete?.();
    return out;
  }
  const sphere = box.getBoundingSphere(new THREE.Sphere());
  return { center: sphere.center, radius: Math.max(sphere.radius, 0.05) };
}

// Follow the body Gymnasium tracks; when the env names none, follow the root body if it can
// move (a free or slide joint), as a runner leaves a fixed camera behind.
function chooseFollowBody(m, cam) {
  const tracked = cam.trackbodyid;
  if (typeof tracked === 'number') return tracked > 0 && tracked < m.nbody ? tracked : -1;
  if (m.nbody < 2) return -1;
  for (let j = 0; j < m.njnt; j++) {
    const body = m.jnt_bodyid[j];
    if (m.body_rootid[body] === 1 && m.body_parentid[body] === 0 &&
        (m.jnt_type[j] === JOINT.FREE || m.jnt_type[j] === JOINT.SLIDE)) return 1;
  }
  return -1;
}

// Move camera and orbit target with the followed body's centre of mass (in x and y only,
// so a jump or a fall stays visible).
function follow() {
  if (!S.camera || !S.current || !S.following || S.followBody <= 0) return;
  const c = S.current.data.subtree_com, b = S.followBody;
  const at = new THREE.Vector3(c[3 * b], c[3 * b + 1], 0);
  if (S.followAt) {
    const delta = at.clone().sub(S.followAt);
    S.camera.position.add(delta);
    S.controls.target.add(delta);
    S.controls.update();
  }
  S.followAt = at;
}

function render() {
  S.dirty = false;
  if (!S.gl || !S.scene) return;
  S.gl.render(S.scene, S.camera);
}

main().catch((e) => {
  showError(`The viewer failed: ${describe(e)}`);
  setStatus('failed');
  console.error(e);
});
