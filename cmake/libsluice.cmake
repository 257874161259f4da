# libsluice: the client library and the embeddable servers (include/sluice/sluice.h and
# server.h), as one shared and one static library, and the install rules for them, the
# binaries, their man pages, the headers, sluice.pc and the CMake package (find_package(sluice)).
include(CMakePackageConfigHelpers)

# Every internal library, in link order; together they need nothing but the system libraries
# named in SLUICE_PC_REQUIRES and SLUICE_PC_LIBS.
set(SLUICE_PARTS sluice_client sluice_dispatcher sluice_worker sluice_dispatcher_recovery
    sluice_dispatcher_core sluice_journal sluice_pipeline sluice_net sluice_common sluice_base
    sluice_proto)
set(SLUICE_PC_REQUIRES
    "libuv libprotobuf-c lmdb snappy jansson zlib libturbojpeg libssl libcrypto libzstd liblz4 libbrotlidec libpcre2-8 raft")
# Plugins loaded by a program call back into its sluice_* functions, so a program linking the
# static library exports them (the shared library exports them itself). libcurl and
# libarchive are not linked: they are opened on first use (common/dynlib.h), as libcurl.so.4
# and libarchive.so.13.
set(SLUICE_PC_LIBS "-pthread -ldl -lm -Wl,--export-dynamic")

set(SLUICE_OBJECTS)
foreach(part ${SLUICE_PARTS})
  list(APPEND SLUICE_OBJECTS $<TARGET_OBJECTS:${part}>)
endforeach()

# libsluice.so (target sluice_shared: the name "sluice" belongs to the CLI), exporting only the
# public API (cmake/libsluice.map).
set(SLUICE_MAP ${CMAKE_SOURCE_DIR}/cmake/libsluice.map)
add_library(sluice_shared SHARED ${SLUICE_OBJECTS})
add_dependencies(sluice_shared ${SLUICE_PARTS})
set_target_properties(sluice_shared PROPERTIES
  OUTPUT_NAME sluice
  VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION_MAJOR}
  LINK_DEPENDS ${SLUICE_MAP})
target_include_directories(sluice_shared INTERFACE ${SLUICE_API_INCLUDE_DIRS})
target_link_libraries(sluice_shared PRIVATE PkgConfig::UV PkgConfig::PROTOBUFC PkgConfig::LMDB
                      PkgConfig::JANSSON ${SNAPPY_LIB} PkgConfig::ZLIB
                      PkgConfig::TURBOJPEG PkgConfig::ZSTD PkgConfig::LZ4 PkgConfig::BROTLIDEC
                      PkgConfig::PCRE2 PkgConfig::RAFT
                      OpenSSL::SSL OpenSSL::Crypto Threads::Threads ${CMAKE_DL_LIBS} m)
target_link_options(sluice_shared PRIVATE
  -Wl,--version-script=${SLUICE_MAP} -Wl,--no-undefined)

# libsluice.a: the same objects linked into one relocatable object whose only global symbols
# are the ones libsluice.so exports, so no internal name can collide with a program's own.
set(SLUICE_STATIC ${CMAKE_ARCHIVE_OUTPUT_DIRECTORY}/libsluice.a)
set(SLUICE_ARCHIVES)
foreach(part ${SLUICE_PARTS})
  list(APPEND SLUICE_ARCHIVES $<TARGET_FILE:${part}>)
endforeach()
add_custom_command(OUTPUT ${SLUICE_STATIC}
  COMMAND ${CMAKE_COMMAND}
    -DLINKER=${CMAKE_LINKER} -DOBJCOPY=${CMAKE_OBJCOPY} -DNM=${CMAKE_NM} -DAR=${CMAKE_AR}
    -DRANLIB=${CMAKE_RANLIB} "-DARCHIVES=$<JOIN:${SLUICE_ARCHIVES},|>"
    -DSHARED=$<TARGET_FILE:sluice_shared> -DOUTPUT=${SLUICE_STATIC}
    -DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/libsluice_static
    -P ${CMAKE_SOURCE_DIR}/cmake/static_archive.cmake
  DEPENDS ${SLUICE_PARTS} sluice_shared ${CMAKE_SOURCE_DIR}/cmake/static_archive.cmake
  COMMENT "Linking self-contained static library libsluice.a"
  VERBATIM)
add_custom_target(sluice_static ALL DEPENDS ${SLUICE_STATIC})

# ---- install ----------------------------------------------------------------------------------

install(TARGETS sluice sluice-dispatcher sluice-worker RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The man pages of the binaries and of the sluice commands, generated from their --help by
# scripts/gen-docs.py and committed (unit.docs_generated fails when they are stale).
file(GLOB SLUICE_MAN_PAGES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/docs/man/*.1)
install(FILES ${SLUICE_MAN_PAGES} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
install(TARGETS sluice_shared LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${SLUICE_STATIC} DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${CMAKE_SOURCE_DIR}/include/sluice/sluice.h ${CMAKE_SOURCE_DIR}/include/sluice/server.h
              ${CMAKE_BINARY_DIR}/include/sluice/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/sluice)

# sluice.pc finds the prefix from its own place (${pcfiledir}), so the tree can be installed
# anywhere with cmake --install --prefix.
file(RELATIVE_PATH SLUICE_PC_TO_PREFIX /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" SLUICE_PC_TO_PREFIX "${SLUICE_PC_TO_PREFIX}")
configure_file(${CMAKE_SOURCE_DIR}/cmake/sluice.pc.in ${CMAKE_BINARY_DIR}/sluice.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/sluice.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

set(SLUICE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/sluice)
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/sluiceConfig.cmake.in
  ${CMAKE_BINARY_DIR}/sluiceConfig.cmake
  INSTALL_DESTINATION ${SLUICE_CMAKE_DIR}
  PATH_VARS CMAKE_INSTALL_LIBDIR CMAKE_INSTALL_INCLUDEDIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/sluiceConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/sluiceConfig.cmake ${CMAKE_BINARY_DIR}/sluiceConfigVersion.cmake
        DESTINATION ${SLUICE_CMAKE_DIR})
