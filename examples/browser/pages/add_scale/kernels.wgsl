// y = (y + 1) * 0.5, `steps` times: eagerly (two kernels per step) or fused (one kernel, one dispatch).
struct Params { steps: u32 }
@group(0) @binding(0) var<storage, read_write> y: array<f32>;
@group(0) @binding(1) var<uniform> params: Params;

@compute @workgroup_size(64)
fn add(@builtin(global_invocation_id) id: vec3u) {
  if (id.x < arrayLength(&y)) { y[id.x] = y[id.x] + 1.0; }
}

@compute @workgroup_size(64)
fn scale(@builtin(global_invocation_id) id: vec3u) {
  if (id.x < arrayLength(&y)) { y[id.x] = y[id.x] * 0.5; }
}

@compute @workgroup_size(64)
fn add_scale(@builtin(global_invocation_id) id: vec3u) {
  if (id.x >= arrayLength(&y)) { return; }
  var value = y[id.x];
  for (var i = 0u; i < params.steps; i++) { value = (value + 1.0) * 0.5; }
  y[id.x] = value;
}
