function checkShape(size) {
  if (size <= 0) throw new RangeError(`workgroup count must be positive, not ${size}`);
}
window.boom = async () => checkShape(0);
window.hang = () => new Promise(() => {});
