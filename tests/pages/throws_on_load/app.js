const config = undefined;
window.limit = config.maxWorkgroups;  // TypeError while the page loads
