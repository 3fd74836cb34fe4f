# The .deb: `cpack -G DEB` (or `cmake --build BUILD --target package`) in a build dir packs what
# `cmake --install` installs, under prefix /usr: bpftrain-collector, bpftrain-top,
# bpftrain-train, bpftrain-loadgen, the NCCL plugins (libnccl-bpftrain.so and its two names), the
# dashboards, /etc/bpftrain/collector.json (a conffile),
# the README, the systemd unit and its service user. Depends are computed by dpkg-shlibdeps.
# CPACK_SET_DESTDIR: the install runs with prefix /usr into a staging DESTDIR, so the unit that
# collector/app writes at install time names /usr/bin and /etc, not the staging dir.
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME bpftrain)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR bpftrain)
set(CPACK_PACKAGE_CONTACT "bpftrain maintainers <bpftrain@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "BPF-observed, self-steering data-parallel training: collector, live view, trainer")
set(CPACK_PACKAGE_DESCRIPTION
    "bpftrain-collector merges kernel signals (BPF probes: migrations, NUMA, TLB, transport queue)\n\
with the metrics training ranks stream over UDP or StatsD, exports them to Prometheus and steers\n\
the trainer's allreduce topology and pinning. bpftrain-top is a live terminal view of one job.\n\
libnccl-bpftrain.so is NCCL's tuner and profiler plugin (NCCL_TUNER_PLUGIN=bpftrain).")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_INSTALL_PREFIX /usr)  # with CPACK_SET_DESTDIR the install prefix comes from here
set(CPACK_SET_DESTDIR ON)
set(CPACK_STRIP_FILES ON)  # RelWithDebInfo binaries are 5-10x larger with their debug info
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "prometheus")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/cmake/deb/conffiles ${PROJECT_SOURCE_DIR}/cmake/deb/postinst
    ${PROJECT_SOURCE_DIR}/cmake/deb/prerm ${PROJECT_SOURCE_DIR}/cmake/deb/postrm)
include(CPack)
